"""What the tests of transformers' own attention classes share: the survey's sizes, a run's error
findings, and the check that a library class runs with none (and names what it declares)."""

from __future__ import annotations

from typing import Any

import attnlab

SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4"]


def errors(result: Any) -> list[tuple[str, str]]:
    """The run's error findings as (code, stage); the run itself must have succeeded."""
    assert result.record.status == "ok", result.record.error
    return [(f.code, f.stage) for f in result.findings if f.severity == "error"]


def assert_runs_clean(model: str, declared: tuple[str, str] | None) -> None:
    """`variant=hf:MODEL` at the survey's sizes: no error finding, and `declared` among its findings."""
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    if declared:
        assert declared in {(f.code, f.stage) for f in result.findings}, [f.message for f in result.findings]
