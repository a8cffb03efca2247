"""Qwen3: Llama's layout with QK-norm."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("qwen3", "model.layers.{i}.self_attn", arguments=ROPE)
