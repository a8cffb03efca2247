from transformers.models.llama.modeling_llama import LlamaAttention
