"""Gemma 3n's text model: QK-norm carries the scale, so its scores are unscaled."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("gemma3n_text", "model.layers.{i}.self_attn", logit_softcap="final_logit_softcapping",
                 mask="local_global", arguments=ROPE, scaling=1.0)
