"""GPT-2: Conv1D projections, a fused c_attn."""

from attnlab.modules.families.adapter import MASK, Family

ADAPTER = Family("gpt2", "transformer.h.{i}.attn", out_proj="c_proj", fused_qkv="c_attn", final_norm="transformer.ln_f",
                 arguments=MASK)
