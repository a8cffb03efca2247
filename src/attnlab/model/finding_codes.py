"""The codes a run inside a model adds (attnlab.model) from what no capture of a lone module holds:
the two models' parameters (the learner's check), the model's own heads on the text, the edit
`intervene=` made. Each is declared beside its check; `expect.findings` accepts them and
docs/reference/codes.md lists them (attnlab.reporting.reference_pages)."""

from __future__ import annotations

from attnlab.diagnosis.finding_code import Code
from attnlab.model import edit_findings, head_patterns, loading_checks

CODES: tuple[Code, ...] = (*loading_checks.CODES, *head_patterns.CODES, *edit_findings.CODES)
NAMES: tuple[str, ...] = tuple(code.code for code in CODES)

__all__ = ["CODES", "NAMES"]
