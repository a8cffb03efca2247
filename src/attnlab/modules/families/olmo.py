"""OLMo: Llama's layout; its config may clamp queries, keys and values (clip_qkv)."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("olmo", "model.layers.{i}.self_attn", arguments=ROPE)
