"""The finding codes, each declared beside its check (attnlab.diagnosis.finding_code), against what
documents it and what produces it: the guide's generated tables, the findings every built-in gives,
a test or built-in for each code, and the checks' own source (no undeclared code, none unused)."""

from __future__ import annotations

import ast
import importlib
import json
import re
import string
import sys
from pathlib import Path

import pytest

import attnlab
from attnlab.diagnosis.check_runner import diagnose_context, run_checks
from attnlab.diagnosis.codes import BY_CODE, CHECKS, CODES, FIRST_WHERE_IT_SHOWS, SEVERITIES, SUPPRESSES
from attnlab.diagnosis.context import build_context
from attnlab.diagnosis.finding_code import TABLES, Code, finds
from attnlab.diagnosis.masking import with_masks_as_neg_inf
from attnlab.record import Finding
from tests._zoo_helpers import BOOK_INPUTS, run_pair

REPO = Path(__file__).resolve().parents[2]
DIAGNOSIS = REPO / "src" / "attnlab" / "diagnosis"
CHECK_FILES = sorted([*(DIAGNOSIS / "checks").glob("*.py"), *(DIAGNOSIS / "recognisers").glob("*.py")])


def _guide_rows() -> dict[str, list[tuple[str, str]]]:
    """{code: [(stage cell, severity), ...]} from every table whose first column is `code` in the
    guide's page "What attnlab checks, and in what order"."""
    text = (REPO / "docs" / "guide" / "checks.md").read_text()
    section = text.split("# What attnlab checks, and in what order", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[tuple[str, str]]] = {}
    in_table = False
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            in_table = False
        elif cells[0] == "code":
            in_table = True
        elif in_table and cells[0].startswith("`"):
            match = re.fullmatch(r"`([a-z_]+)`( \(info\))?", cells[0])
            assert match, f"guide row not `code` or `code` (info): {cells[0]}"
            rows.setdefault(match[1], []).append((cells[1], "info" if match[2] else "error"))
    return rows


def test_the_guide_documents_every_declared_code_once_with_its_stages_and_severity():
    rows = _guide_rows()
    assert sorted(rows) == sorted(BY_CODE)
    for code, cells in rows.items():
        declared = BY_CODE[code]
        assert len(cells) == 1, code
        assert {severity for _, severity in cells} == {declared.severity}, code
        if declared.stages == FIRST_WHERE_IT_SHOWS:
            assert all(stage.startswith("first stage") for stage, _ in cells), code
        else:
            shown = {s.strip() for stage, _ in cells for s in stage.split("/")}
            assert shown == set(declared.stages), code


def test_every_finding_a_built_in_gives_fits_its_declared_code():
    golden = json.loads((REPO / "tests" / "golden" / "behaviour.json").read_text())
    seen = {tuple(f[:3]) for case in golden.values() for f in case["findings"]}
    assert seen  # the golden file holds findings
    for code, stage, severity in seen:
        declared = BY_CODE[code]
        assert severity == declared.severity, code
        assert declared.stages == FIRST_WHERE_IT_SHOWS or stage in declared.stages, (code, stage)


def test_every_code_names_a_built_in_or_a_test_that_shows_it():
    variants = set(attnlab.list_variants())
    for declared in CODES:
        assert declared.shown_by, declared.code
        for shown_by in declared.shown_by:
            if "::" in shown_by:
                path, name = shown_by.split("::")
                assert f"def {name}(" in (REPO / path).read_text(), shown_by
            else:
                assert shown_by in variants, shown_by


def test_each_code_is_declared_once_by_one_check_and_suppresses_only_declared_codes():
    assert len(BY_CODE) == len(CODES)  # no name declared twice
    assert len({id(check) for check in CHECKS}) == len(CHECKS)  # each check runs once
    for declared in CODES:
        assert declared.severity in SEVERITIES and declared.table in TABLES, declared.code
    for code, dropped in SUPPRESSES.items():
        assert code in BY_CODE and set(dropped) <= set(BY_CODE), code


def _module_codes(module: object) -> dict[str, Code]:
    return {name: value for name, value in vars(module).items() if isinstance(value, Code)}


def _module_of(path: Path) -> object:
    name = ".".join(path.relative_to(REPO / "src").with_suffix("").parts)
    return importlib.import_module(name)


@pytest.mark.parametrize("path", CHECK_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_check_file_makes_findings_only_through_its_declared_codes(path: Path):
    """No Finding(...) written by hand, and every Code a file declares is run (its check is in
    CHECKS and lists it) and produced (named inside a function body, not only in `@finds`)."""
    tree = ast.parse(path.read_text())
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "Finding" not in calls and "finding" not in calls, path
    module = _module_of(path)
    registered = {id(code) for check in CHECKS for code in check.codes}
    used = {node.id for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
            for statement in fn.body for node in ast.walk(statement) if isinstance(node, ast.Name)}
    for name, code in _module_codes(module).items():
        assert id(code) in registered, f"{path.name}: {name} is declared but no check in CHECKS lists it"
        assert name in used, f"{path.name}: {name} is declared but no function makes it"


def test_every_declared_code_sits_beside_the_check_that_lists_it():
    for check in CHECKS:
        beside = _module_codes(sys.modules[check.run.__module__]).values()
        assert all(any(code is other for other in beside) for code in check.codes), check.name


def test_templates_name_facts_and_never_the_finding_s_own_fields():
    for declared in CODES:
        for template in declared.templates():
            fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
            assert not fields & {"heads", "batch"}, declared.code  # those are the finding's, not facts


def test_a_check_that_returns_a_code_it_did_not_declare_is_refused(monkeypatch):
    variant, reference, d, _, _ = run_pair("reference", BOOK_INPUTS, 2, shared=False)
    ctx = build_context(with_masks_as_neg_inf(variant), with_masks_as_neg_inf(reference), d, weights_shared=False)
    rogue = finds(BY_CODE["masked"])(lambda ctx, found: [Finding("scaling", "scaled_scores", "error", "made up")])
    monkeypatch.setattr("attnlab.diagnosis.check_runner.CHECKS", (rogue,))
    with pytest.raises(AssertionError, match="returned scaling"):
        run_checks(ctx)


def test_finding_severity_s_comment_lists_exactly_the_declared_severities():
    source = (REPO / "src" / "attnlab" / "record" / "model.py").read_text()
    line = next(line for line in source.splitlines() if line.strip().startswith("severity: str"))
    assert set(re.findall(r'"([a-z]+)"', line.split("#", 1)[1])) == set(SEVERITIES)


_SELF_ATTENTION_V1 = '''
import torch
import torch.nn as nn

import attnlab


@attnlab.variant("NAME")
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = attn_weights @ values
        return RETURNED
'''


def _run(plugin_folder, use_plugins, name: str, returned: str, *overrides: str):
    use_plugins(plugin_folder(name, _SELF_ATTENTION_V1.replace("NAME", name).replace("RETURNED", returned)))
    return attnlab.run(name, overrides=list(overrides)).record


@pytest.mark.slow
def test_a_wrong_output_after_a_right_context_is_output_path(plugin_folder, use_plugins):
    record = _run(plugin_folder, use_plugins, "output_plus_one", "context_vec + 1")
    assert [(f.code, f.stage, f.severity) for f in record.findings] == [("output_path", "output", "error")]
    assert record.first_divergent_stage == "output"


def test_a_row_that_is_not_its_own_computation_is_batched_single_mismatch():
    """Capture labels the stages a module computes consistently, so no module written here makes a
    context that is not its own weights @ values; the check is fed that measurement directly."""
    variant, reference, d, _, findings = run_pair("reference", BOOK_INPUTS, 2, shared=False)
    assert findings == [] and d["batched_single_max_abs_diff"] < 1e-6
    measured = {**d, "batched_single_max_abs_diff": 0.25}  # row i off its own computation by 0.25
    ctx = build_context(with_masks_as_neg_inf(variant), with_masks_as_neg_inf(reference), measured, weights_shared=False)
    found = diagnose_context(ctx)  # the diagnosis analyse makes, of these diagnostics
    assert [(f.code, f.stage, f.severity) for f in found] == [("batched_single_mismatch", "context", "error")]
    assert "by up to 0.25" in found[0].message
