"""MPT: a fused Wqkv, an ALiBi bias passed as position_bias, a bool mask."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("mpt", "transformer.blocks.{i}.attn", out_proj="out_proj", fused_qkv="Wqkv", final_norm="transformer.norm_f",
                 mask_values="bool", arguments={"attention_mask": "mask", "position_bias": "position_bias"},
                 spellings={"d_in": ("d_model",), "num_heads": ("n_heads",)})
