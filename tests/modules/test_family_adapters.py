"""Family adapters: every field is read by running code, and the adapters' declared model paths
are where the model keeps its attention (a correct copy there changes nothing)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import attnlab
from attnlab.modules.families import Family

SRC = Path(attnlab.__file__).parent
ADAPTERS = SRC / "modules" / "families"
# fields whose readers are not written yet (reported, not hidden): the logits of a model attnlab runs
# are its own forward's for Hugging Face models, so only a model of your own would read these
UNREAD = {"logit_scale", "logit_divide"}


def _attribute_reads() -> set[str]:
    """Attribute names read anywhere in src outside the adapter files (the registry included)."""
    read = set()
    for path in SRC.rglob("*.py"):
        if path.parent == ADAPTERS and path.name != "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                read.add(node.attr)
    return read


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Family) if f.name not in UNREAD])
def test_every_adapter_field_is_read_by_running_code(name):
    assert name in _attribute_reads(), f"Family.{name} is declared but no code outside the adapters reads it"


transformers = pytest.importorskip("transformers")


def test_falcon_s_attention_is_found_where_its_adapter_puts_it_and_a_copy_changes_nothing():
    result = attnlab.run("hf:falcon", overrides=["model=hf:falcon", "model.num_hidden_layers=2", "model.hidden_size=64",
                                                "model.num_attention_heads=4", "inputs=text", "layer=1"])
    assert result.record.status == "ok", result.record.error
    assert result.record.model.attention == "transformer.h.1.self_attention"
    assert result.record.model.effect.kl_max < 1e-6
