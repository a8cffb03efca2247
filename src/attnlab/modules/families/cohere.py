"""Cohere: logits multiplied by the config's logit_scale."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("cohere", "model.layers.{i}.self_attn", logit_scale="logit_scale", arguments=ROPE)
