"""ViT: an image encoder, built from its config alone."""

from attnlab.modules.families.adapter import CONFIG_ONLY, Family

ADAPTER = Family("vit", "vit.layers.{i}.attention", out_proj="o_proj", final_norm="vit.layernorm",
                 mask="bidirectional", constructor=CONFIG_ONLY, task="image")
