"""GPTBigCode: GPT-2's layout; with a key and value per head, c_attn holds them per head."""

from attnlab.modules.families.adapter import MASK, Family

ADAPTER = Family("gpt_bigcode", "transformer.h.{i}.attn", out_proj="c_proj", fused_qkv="c_attn", fused_order="per_head",
                 final_norm="transformer.ln_f", arguments=MASK)
