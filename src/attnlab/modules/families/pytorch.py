"""PyTorch's nn.MultiheadAttention: a fused in_proj, a bool attn_mask."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("torch", "", out_proj="out_proj", fused_qkv="in_proj", final_norm=None, mask="bidirectional",
                 mask_values="bool", arguments={"attn_mask": "mask"}, spellings={"d_in": ("embed_dim",)})
