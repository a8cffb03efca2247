"""DeBERTa-v2 (and DeBERTa): disentangled attention, a 1 keep / 0 drop mask, built from its config alone."""

from attnlab.modules.families.adapter import CONFIG_ONLY, MASK, Family

ADAPTER = Family("deberta-v2", "deberta.encoder.layer.{i}.attention.self", out_proj=None, final_norm=None,
                 mask="bidirectional", mask_values="binary", arguments=MASK, attention_class="DisentangledSelfAttention",
                 constructor=CONFIG_ONLY, aliases=("deberta",))
