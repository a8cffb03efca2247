"""Granite: logits divided by the config's logits_scaling."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("granite", "model.layers.{i}.self_attn", logit_divide="logits_scaling", arguments=ROPE)
