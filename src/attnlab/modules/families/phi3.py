"""Phi-3: a fused qkv_proj, [q | k | v] blocks."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("phi3", "model.layers.{i}.self_attn", fused_qkv="qkv_proj", mask="sliding", arguments=ROPE)
