"""CLIP's text model: its model passes is_causal=True to a class declared non-causal."""

from attnlab.modules.families.adapter import CONFIG_ONLY, Family

ADAPTER = Family("clip_text_model", "text_model.encoder.layers.{i}.self_attn", out_proj="out_proj",
                 final_norm="text_model.final_layer_norm", arguments={"attention_mask": "mask", "is_causal": "is_causal"},
                 constructor=CONFIG_ONLY)
