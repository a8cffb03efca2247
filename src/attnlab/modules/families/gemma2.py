"""Gemma 2: local and global layers alternating, final logits soft-capped."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("gemma2", "model.layers.{i}.self_attn", logit_softcap="final_logit_softcapping", mask="local_global",
                 arguments=ROPE)
