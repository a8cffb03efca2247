from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
