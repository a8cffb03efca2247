"""Mistral: Llama's layout with a sliding-window causal mask."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("mistral", "model.layers.{i}.self_attn", mask="sliding", arguments=ROPE)
