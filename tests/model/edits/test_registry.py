"""Intervention kinds are a registry (attnlab.model.edits.KINDS): a kind of one's own is one class and
one line in it, checked, run, named and measured as the built-in ones are."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import Tensor

import attnlab
from attnlab.app.resolvers import run_name
from attnlab.errors import UserError
from attnlab.model.edits import KINDS
from attnlab.model.edits.kind_base import Chosen, ContextKind
from attnlab.model.interventions import intervention
from tests.model.by_hand import HS, check_effect, eager_model, effect_by_hand
from tests.model.conftest import TEXT

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]


class NegateHead(ContextKind):
    """Head `intervene.head`'s context vectors negated."""

    needs = "head"

    def contexts(self, chosen: Chosen, values: Tensor, patched: Tensor | None,
                 lengths: tuple[int, ...] | None) -> Tensor:
        context_vec = values.clone()  # (1, T, H, hs)
        context_vec[:, :, chosen.head] = -values[:, :, chosen.head]
        return context_vec

    def what(self, chosen: Chosen) -> str:
        return "negated"


def negated_by_hand(head: int):
    """An edit of c_proj's input (1, T, d): head `head`'s columns negated."""
    def negate(context: Tensor) -> Tensor:  # (1, T, d)
        context = context.clone()
        context[..., head * HS:(head + 1) * HS] *= -1
        return context
    return negate


def test_the_built_in_kinds_are_registered_by_name() -> None:
    assert list(KINDS) == ["observe", "ablate_head", "scale_scores", "patch", "function"]
    with pytest.raises(UserError, match=r"^intervene=swap: unknown; allowed are observe, ablate_head, scale_scores, "
                                        r"patch, function$"):
        intervention({"name": "swap"})


def test_a_kind_of_one_s_own_is_one_line_in_the_registry(tiny_gpt2, monkeypatch) -> None:
    monkeypatch.setitem(KINDS, "negate_head", NegateHead())
    with pytest.raises(UserError, match=r"^intervene=negate_head: needs intervene.head=...$"):
        intervention({"name": "negate_head"})
    with pytest.raises(UserError, match=r"allowed are observe, ablate_head, scale_scores, patch, function, negate_head$"):
        intervention({"name": "swap"})
    assert run_name("reference", {"name": "negate_head", "head": 1, "mode": "mean"}) == "negate_head-head=1"

    model, ids, _ = eager_model(tiny_gpt2)
    overrides = [f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'", "layer=1", *QUIET]
    record = attnlab.run(overrides=overrides, intervene={"name": "negate_head", "head": 1}).record
    check_effect(record.model.effect, effect_by_hand(model, ids, 1, negated_by_hand(1)), record)
    assert record.variant.name == "negate_head(head=1)"
    said = [f for f in record.findings if f.code == "intervention"]
    assert [(f.severity, f.heads) for f in said] == [("info", [1])]
    assert "head 1's context vectors negated" in said[0].message
    assert not [f for f in record.findings if f.severity == "error"]


def test_the_development_guide_shows_a_kind_as_its_file_holds_it() -> None:
    root = Path(__file__).resolve().parents[3]
    guide = (root / "docs" / "guide" / "development.md").read_text(encoding="utf-8")
    shown = guide.split("An **intervention kind**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "class Patch(ContextKind)" in shown
    assert shown in (root / "src" / "attnlab" / "model" / "edits" / "patch.py").read_text(encoding="utf-8")
    registry = (root / "src" / "attnlab" / "model" / "edits" / "__init__.py").read_text(encoding="utf-8")
    assert '    "patch": patch.KIND,\n' in registry and '`"patch": patch.KIND,`' in guide
