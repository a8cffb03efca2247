"""SmolLM3: Llama's layout; the layers its config's no_rope_layers marks 0 leave out RoPE."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("smollm3", "model.layers.{i}.self_attn", arguments=ROPE)
