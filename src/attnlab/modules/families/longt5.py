"""LongT5: T5's scores; its encoder's default self-attention is local (LocalSelfAttention)."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("longt5", "encoder.block.{i}.layer.0.LocalSelfAttention", out_proj="o",
                 final_norm="encoder.final_layer_norm", mask="bidirectional",
                 arguments={"mask": "mask", "position_bias": "position_bias"},
                 spellings={"d_in": ("d_model",), "head_dim": ("d_kv",)}, scaling=1.0,
                 stacks={"encoder": "block.{i}.layer.0.LocalSelfAttention", "decoder": "block.{i}.layer.0.SelfAttention"})
