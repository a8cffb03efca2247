"""Llama 4's text model: a chunked causal mask."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("llama4_text", "model.layers.{i}.self_attn", mask="chunked", arguments=ROPE)
