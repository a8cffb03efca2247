"""diffusers' Attention: query_dim, heads and dim_head."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("diffusers", "", out_proj="to_out", final_norm=None, mask="bidirectional",
                 spellings={"d_in": ("query_dim",), "num_heads": ("heads",), "head_dim": ("dim_head",)})
