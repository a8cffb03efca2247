"""Falcon: a fused query_key_value; its config keeps the key/value heads as num_kv_heads."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("falcon", "transformer.h.{i}.self_attention", out_proj="dense", fused_qkv="query_key_value",
                 fused_order="per_head", final_norm="transformer.ln_f",
                 arguments={**ROPE, "alibi": "alibi"}, spellings={"num_kv_heads": ("num_kv_heads",)})
