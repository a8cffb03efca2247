"""DeepSeek-V3: latent attention (named by recognisers.latent)."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("deepseek_v3", "model.layers.{i}.self_attn", arguments=ROPE)
