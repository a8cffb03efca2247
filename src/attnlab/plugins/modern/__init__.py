"""Beyond the source: modern attention (GQA, RoPE, ALiBi, softcap, ...) as copies of its MultiHeadAttention with one change, and PyTorch's own kernels."""
