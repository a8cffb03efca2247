"""The codes a run inside a model adds, each declared beside its check as the diagnosis's codes are:
no Finding written by hand in those files, every declared code collected (attnlab.model.finding_codes),
none sharing a name with a diagnosis code, each shown by a test that exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnlab.diagnosis.codes import BY_CODE
from attnlab.diagnosis.finding_code import MODEL_TABLE, SEVERITIES, Code
from attnlab.model import edit_findings, head_patterns, loading_checks
from attnlab.model.finding_codes import CODES, NAMES

REPO = Path(__file__).resolve().parents[2]
CHECK_MODULES = (loading_checks, head_patterns, edit_findings)


@pytest.mark.parametrize("module", CHECK_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_model_check_makes_findings_only_through_the_codes_it_declares(module) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "Finding" not in calls, module.__name__
    declared = [value for value in vars(module).values() if isinstance(value, Code)]
    assert declared and all(any(code is other for other in CODES) for code in declared), module.__name__


def test_the_model_codes_are_declared_once_apart_from_the_diagnosis_s() -> None:
    assert NAMES == ("qkv_order", "not_transposed", "bias_missing", "previous_token_head", "first_token_head",
                     "uniform_head", "intervention")
    assert not set(NAMES) & set(BY_CODE)
    for code in CODES:
        assert code.severity in SEVERITIES and code.table == MODEL_TABLE and code.meaning, code.code
        for shown_by in code.shown_by:
            path, name = shown_by.split("::")
            assert f"def {name}(" in (REPO / path).read_text(), shown_by
