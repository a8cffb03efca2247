"""timm's vision blocks: a fused qkv, dim for the width."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("timm", "blocks.{i}.attn", out_proj="proj", fused_qkv="qkv", final_norm="norm", mask="bidirectional",
                 spellings={"d_in": ("dim",)})
