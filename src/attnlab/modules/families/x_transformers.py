"""x-transformers: heads, kv_heads and dim_head are attnlab's num_heads, num_kv_heads and head_dim."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("x_transformers", "attn_layers.layers.{i}.1", out_proj="to_out", final_norm="attn_layers.final_norm",
                 mask="bidirectional", mask_values="bool",
                 spellings={"num_heads": ("heads",), "num_kv_heads": ("kv_heads",), "head_dim": ("dim_head",)})
