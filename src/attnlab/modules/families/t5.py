"""T5 (and mT5, UMT5): unscaled scores, the initialisation carries the scale; a relative position bias."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("t5", "encoder.block.{i}.layer.0.SelfAttention", out_proj="o", final_norm="encoder.final_layer_norm",
                 mask="bidirectional", arguments={"mask": "mask", "position_bias": "position_bias"},
                 spellings={"d_in": ("d_model",), "head_dim": ("d_kv",)}, scaling=1.0, aliases=("mt5", "umt5"),
                 stacks={"encoder": "block.{i}.layer.0.SelfAttention", "decoder": "block.{i}.layer.0.SelfAttention"})
