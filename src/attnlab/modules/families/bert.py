"""BERT: an encoder; its self-attention sits inside a wrapper whose output adds the projection."""

from attnlab.modules.families.adapter import MASK, Family

ADAPTER = Family("bert", "bert.encoder.layer.{i}.attention.self", out_proj=None, final_norm=None, mask="bidirectional",
                 arguments=MASK)
