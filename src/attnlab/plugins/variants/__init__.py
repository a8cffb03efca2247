"""The source's classes (SelfAttention_v1 and v2, CausalAttention, the wrapper, MultiHeadAttention) and the book's changes to them."""
