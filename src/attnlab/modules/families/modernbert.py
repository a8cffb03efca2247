"""ModernBERT: an encoder with a fused Wqkv; its local layers' window is both ways."""

from attnlab.modules.families.adapter import ROPE, Family

ADAPTER = Family("modernbert", "model.layers.{i}.attn", out_proj="Wo", fused_qkv="Wqkv", final_norm="model.final_norm",
                 mask="bidirectional", arguments=ROPE)
