"""DeepSeek-V3: latent attention (named by recognisers.latent)."""

from attnlab.modules.families.adapter import Family, ROPE

ADAPTER = Family("deepseek_v3", "model.layers.{i}.self_attn", arguments=ROPE)
