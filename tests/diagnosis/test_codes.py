"""The declared table of finding codes (attnlab.diagnosis.codes) against what documents it and
what produces it: the README's diagnosis tables, the findings every built-in gives, and a test or
built-in for each code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import attnlab
from attnlab.diagnosis.check_runner import diagnose_context
from attnlab.diagnosis.codes import BY_CODE, CODES, FIRST_WHERE_IT_SHOWS
from attnlab.diagnosis.context import build_context
from attnlab.diagnosis.masking import with_masks_as_neg_inf
from tests._zoo_helpers import BOOK_INPUTS, run_pair

REPO = Path(__file__).resolve().parents[2]


def _readme_rows() -> dict[str, list[tuple[str, str]]]:
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
            assert match, f"README row not `code` or `code` (info): {cells[0]}"
            rows.setdefault(match[1], []).append((cells[1], "info" if match[2] else "error"))
    return rows


def test_the_readme_diagnosis_tables_list_the_declared_codes_stages_and_severities():
    rows = _readme_rows()
    assert sorted(rows) == sorted(BY_CODE)
    for code, cells in rows.items():
        declared = BY_CODE[code]
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
        shown_by = declared.shown_by
        if "::" in shown_by:
            path, name = shown_by.split("::")
            assert f"def {name}(" in (REPO / path).read_text(), shown_by
        else:
            assert shown_by in variants, shown_by


def test_the_table_runs_each_code_in_one_place_and_suppresses_only_declared_codes():
    for declared in CODES:
        assert set(declared.suppresses) <= set(BY_CODE), declared.code
        assert declared.severity in ("error", "info")
        same_check = [c.order for c in CODES if c.check is declared.check]
        assert len(set(same_check)) == 1, declared.code  # one check runs once, at one place in the order
    assert len(BY_CODE) == len(CODES)


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
