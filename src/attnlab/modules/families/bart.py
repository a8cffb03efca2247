"""BART: an encoder–decoder whose attention is built from sizes, then the config."""

from attnlab.modules.families.adapter import BY_SIZE, MASK, Family

ADAPTER = Family("bart", "model.encoder.layers.{i}.self_attn", out_proj="out_proj", final_norm=None, mask="bidirectional",
                 arguments=MASK, spellings={"d_in": ("d_model", "embed_dim"), "num_heads": ("encoder_attention_heads",)},
                 constructor=BY_SIZE,
                 stacks={"encoder": "layers.{i}.self_attn", "decoder": "layers.{i}.self_attn"})
