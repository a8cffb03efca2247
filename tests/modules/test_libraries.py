"""Other libraries' attention classes with zero edits: a plugin file that only imports the class
(x-transformers' Attention in its main settings, diffusers' Attention, torch's nn.MultiheadAttention),
and copies of four (x-transformers', diffusers', torch's and the book's Llama 3 GroupedQueryAttention)
with a mistake planted, each found at its stage."""

from __future__ import annotations

import pytest

import attnlab
from tests.modules.hf_runs import SIZES
from tests.modules.test_arguments import BOOK_GQA

IMPORTS = {
    "x_transformers": "from x_transformers.x_transformers import Attention\n",
    "diffusers": "from diffusers.models.attention_processor import Attention\n",
    "torch": "from torch.nn import MultiheadAttention\n",
}


@pytest.fixture
def library(use_plugins, plugin_folder):
    def imported(name: str, source: str | None = None) -> str:
        if name != "book":  # the book's Llama 3 code, written in tests/modules/test_arguments.py
            pytest.importorskip(name)
        use_plugins(plugin_folder(f"{name}_attention", source or IMPORTS[name]))
        return f"{name}_attention"
    return imported


def _codes(variant: str, *overrides: str) -> list[tuple[str, str, str]]:
    result = attnlab.run(variant, overrides=[*SIZES, *overrides])
    assert result.record.status == "ok", result.record.error
    return [(f.code, f.stage, f.severity) for f in result.findings]


@pytest.mark.parametrize("name, overrides, expected, reference", [
    ("x_transformers", [], [], "bidirectional_attention"),  # its default: no mask, so a reference without one
    ("x_transformers", ["+variant.params.causal=true"], [], "multi_head_attention"),
    ("x_transformers", ["+variant.params.causal=true", "num_kv_heads=2"], [("kv_heads", "keys", "info")],
     "multi_head_attention"),
    ("x_transformers", ["+variant.params.qk_norm=true"], [("cosine_attention", "queries", "info")],
     "bidirectional_attention"),
    ("diffusers", [], [], "bidirectional_attention"),
    ("torch", [], [], "bidirectional_attention"),  # attn_mask left at its default: unmasked
])
@pytest.mark.slow
def test_an_import_only_file_runs_with_no_error_against_the_reference_it_declares(library, name, overrides, expected,
                                                                                reference):
    variant = library(name)
    result = attnlab.run(variant, overrides=[*SIZES, *overrides])
    assert result.record.status == "ok", result.record.error
    assert result.record.reference.name == reference
    assert [(f.code, f.stage, f.severity) for f in result.findings] == expected


PLANTED = {
    "x_transformers": ('''
        from functools import partial

        import torch.nn.functional as F
        from x_transformers.x_transformers import Attention


        class WrongAxis(Attention):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.attend.attn_fn = partial(F.softmax, dim=-2)  # changed: over the queries
    ''', ("softmax_axis", "weights")),
    "diffusers": ('''
        from diffusers.models.attention_processor import Attention, AttnProcessor


        class Unscaled(Attention):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.set_processor(AttnProcessor())  # the processor that reads self.scale
                self.scale = 1.0  # changed: no 1/sqrt(head_dim)
    ''', ("scaling", "scaled_scores")),
    "torch": ('''
        from torch.nn import MultiheadAttention


        class KeysReversed(MultiheadAttention):
            def forward(self, x, attn_mask=None):  # x: (tokens, batch, d_in), torch's default layout
                return super().forward(x, x.flip(0), x, attn_mask=attn_mask, need_weights=False)[0]  # changed
    ''', ("key_index", "keys")),
    "book": (BOOK_GQA.replace("keys, queries = apply_rope(keys, cos, sin), apply_rope(queries, cos, sin)",
                              "queries = apply_rope(queries, cos, sin)  # changed: the keys are not rotated"),
             ("rotary_misapplied", "keys")),
}


@pytest.mark.parametrize("name", PLANTED)
@pytest.mark.slow
def test_a_mistake_planted_in_a_copy_is_found_at_its_stage(library, name):
    source, (code, stage) = PLANTED[name]
    codes = _codes(library(name, source))
    assert (code, stage, "error") in codes, codes
