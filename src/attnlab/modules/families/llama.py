"""Llama: the decoder every Llama-style family copies; RoPE given as position embeddings."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("llama", "model.layers.{i}.self_attn", arguments=ROPE)
