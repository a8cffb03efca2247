"""./models/NAME.py that only imports its model class (the book's own package's way)."""

from __future__ import annotations

import pytest

import attnlab
from tests.model.learner import GPT_MODEL


def test_a_models_file_that_only_imports_its_class_runs(tmp_path, monkeypatch):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "gpt.py").write_text(GPT_MODEL)  # the source's ch. 4 GPTModel, in a package
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "imported.py").write_text("from mypkg.gpt import GPT_CONFIG, GPTModel\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = attnlab.run("multi_head_attention", model="imported", layer=0,
                         inputs={"kind": "text", "text": "Every effort moves you"})
    assert result.record.model.attention == "trf_blocks.0.att"
    assert result.record.model.effect.kl_max == pytest.approx(0.0, abs=1e-6)  # the same class: no change
