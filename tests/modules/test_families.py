"""Model families as data: one test row per family row, each class built from its own
transformers config at hidden size 64, 4 heads, 8 tokens, under eager and sdpa; and the README's
table equal to the rows."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnlab
from attnlab.modules.families import FAMILIES, GENERIC, family_of, markdown_table, spellings
from tests.modules.hf_runs import SIZES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "modules.md"  # the supported table
LIBRARIES = {"torch", "llms_from_scratch", "x_transformers", "diffusers", "timm"}  # tested in test_arguments/_constructors
# Rows whose single-module run still has an error finding, owned elsewhere (reported, not hidden):
OPEN: dict[str, str] = {}
# The info finding each declared change is named by
DECLARED = {"t5": "declared_scale", "mt5": "declared_scale", "umt5": "declared_scale", "longt5": "declared_scale",
            "granite": "declared_scale", "gemma2": "declared_scale", "mpt": "position_bias",
            "deepseek_v3": "latent_attention", "gemma3n_text": "declared_scale"}


def test_the_guide_s_table_is_the_rows():
    text = PAGE.read_text()
    block = text.split("<!-- families:start -->\n", 1)[1].split("\n<!-- families:end -->", 1)[0]
    assert block == markdown_table(FAMILIES)


def test_every_row_is_one_family_and_generic_spellings_come_first():
    names = [row.name for row in FAMILIES]
    assert len(names) == len(set(names))
    assert spellings("num_heads")[: len(GENERIC.spellings["num_heads"])] == GENERIC.spellings["num_heads"]
    assert "kv_heads" in spellings("num_kv_heads") and "d_kv" in spellings("head_dim")


def test_a_family_is_found_from_a_config_its_class_or_what_holds_one() -> None:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8)
    gpt2 = next(row for row in FAMILIES if row.name == "gpt2")
    assert family_of(config) is gpt2 and family_of(GPT2Config) is gpt2
    assert family_of(GPT2Model(config)) is gpt2 and family_of(GPT2Model(config).h[0].attn) is gpt2
    assert family_of(object()) is GENERIC and family_of(None) is GENERIC


transformers = pytest.importorskip("transformers")
ROWS = [pytest.param(name, marks=pytest.mark.xfail(reason=OPEN[name], strict=False)) if name in OPEN else name
        for row in FAMILIES if row.name not in LIBRARIES for name in (row.name, *row.aliases)]


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ROWS)
def test_each_family_runs_with_no_error_finding(name, implementation):
    if name == "gemma2" and implementation == "sdpa":
        pytest.skip("Gemma 2's class refuses sdpa: its softcap has no sdpa kernel")
    result = attnlab.run(f"hf:{name}", overrides=[*SIZES, f"attn_implementation={implementation}"])
    assert result.record.status == "ok", result.record.error
    errors = [(f.code, f.stage) for f in result.findings if f.severity == "error"]
    assert errors == []
    if name in DECLARED:
        assert DECLARED[name] in {f.code for f in result.findings if f.severity == "info"}


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_gpt_bigcode_with_a_key_value_head_per_query_head_runs_with_no_finding(implementation):
    """multi_query=False: c_attn holds each head's query, key and value side by side."""
    result = attnlab.run("hf:gpt_bigcode", overrides=[*SIZES, f"attn_implementation={implementation}",
                                                      "variant.params.multi_query=false"])
    assert result.record.status == "ok", result.record.error
    assert result.findings == []
    assert result.record.variant.diagnostics["divergence_output"] < 1e-5
