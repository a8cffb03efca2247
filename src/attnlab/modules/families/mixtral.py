"""Mixtral: Mistral's attention (its experts are in the MLP)."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("mixtral", "model.layers.{i}.self_attn", mask="sliding", arguments=ROPE)
