"""The book's classes (llms_from_scratch): a bool mask, grouped keys as num_kv_groups."""

from attnlab.modules.families.adapter import Family

ADAPTER = Family("llms_from_scratch", "trf_blocks.{i}.att", out_proj="out_proj", final_norm="final_norm",
                 mask_values="bool", arguments={"mask": "mask"},
                 spellings={"d_in": ("d_in",), "num_kv_heads": ("num_kv_groups",)})
