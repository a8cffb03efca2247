"""Mixtral: Mistral's attention (its experts are in the MLP)."""

from attnlab.modules.families.adapter import Family, ROPE

ADAPTER = Family("mixtral", "model.layers.{i}.self_attn", mask="sliding", arguments=ROPE)
