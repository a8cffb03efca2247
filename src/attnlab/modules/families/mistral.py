"""Mistral: Llama's layout with a sliding-window causal mask."""

from attnlab.modules.families.adapter import Family, ROPE

ADAPTER = Family("mistral", "model.layers.{i}.self_attn", mask="sliding", arguments=ROPE)
