"""A variant that cannot stand in for a model's multi-head layer: refused before the model loads,
naming the zoo's multi-head class with the same change; the default stands as the book's
MultiHeadAttention, which in the model's place changes nothing."""

from __future__ import annotations

import shutil

import pytest

import attnlab
from attnlab.errors import UserError
from attnlab.model.declared_config import read_declared
from attnlab.model.model_spec import model_spec
from attnlab.model.variant_fit import check_variant_fits
from attnlab.modules.registry import discover, get_variant
from tests.model.conftest import TEXT

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]


def test_a_single_head_mistake_is_refused_before_the_model_loads_naming_its_counterpart(tiny_gpt2, tmp_path) -> None:
    shutil.copy(tiny_gpt2 / "config.json", tmp_path / "config.json")  # no weights: loading would fail otherwise
    with pytest.raises(UserError) as raised:
        attnlab.run("unscaled", overrides=[f"model.path={tmp_path}", "inputs=text", f"inputs.text='{TEXT}'", *QUIET])
    assert str(raised.value) == ("variant=unscaled: a single-head class (SelfAttentionUnscaled takes no head count) "
                                 "cannot stand in for the model's 4-head attention; its multi-head counterpart: "
                                 "variant=mha_unscaled")


def test_an_hf_type_s_default_head_count_is_known_before_it_loads() -> None:
    """hf:gpt2 without size keys: its config class's 12 heads, read without building the model."""
    with pytest.raises(UserError, match=r"the model's 12-head attention; a variant that fits: multi_head_attention"):
        check_variant_fits("linear", read_declared(model_spec({"name": "hf:gpt2"})).heads)


BOOK = {"reference", "causal_attention", "unscaled", "scaled_by_dk", "wrong_softmax_axis", "causal_mask_missing"}


def test_the_book_s_single_head_classes_declare_their_multi_head_counterparts() -> None:
    assert {spec.name for spec in discover().specs.values() if spec.builtin and spec.multi_head} == BOOK


@pytest.mark.parametrize("book", sorted(BOOK))
def test_each_counterpart_is_a_multi_head_class_with_the_book_s_change(book) -> None:
    """The counterpart exists, takes a head count, and (for a mistake) is expected to give the
    book's class's own finding."""
    single = get_variant(book)
    multi = get_variant(single.multi_head)
    assert "num_heads" in multi.cls.__init__.__code__.co_varnames
    assert multi.expected_finding == single.expected_finding


def test_the_default_variant_runs_as_the_book_s_multi_head_attention(tiny_gpt2) -> None:
    result = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'", "layer=1",
                                    *QUIET])
    record = result.record
    assert record.status == "ok", record.error
    assert record.variant.name == "multi_head_attention"
    assert record.model.effect.kl_mean < 1e-6  # a correct copy of the layer with its weights
    assert record.first_divergent_stage is None
