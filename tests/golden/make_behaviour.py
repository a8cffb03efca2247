"""Writes behaviour.json: what every built-in variant gives today, the check that a refactor kept.

Run from the repository root: `python tests/golden/make_behaviour.py`. Written once from the main
before the redesign; later work that changes findings or records on purpose re-runs it
and says so in its commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import attnlab

SIZES = {
    "book": {},
    "random8": {"inputs": "random", "overrides": ["inputs.n_tokens=8", "inputs.d_in=8", "d_out=8", "num_heads=2"]},
}
SKIPPED = {"flex_attention", "impl_flex_attention"}  # torch.compile on the CPU: tens of seconds each


def behaviour(variant: str, size: str) -> dict:
    spec = dict(SIZES[size])
    overrides = list(spec.pop("overrides", []))
    if "inputs" in spec:
        overrides.insert(0, f"inputs={spec.pop('inputs')}")
    result = attnlab.run(variant, 123, overrides=overrides, log={"tensorboard": False, "table": False, "html": False})
    record = result.record
    output = record.variant.stages.get("output")
    return {
        "status": record.status,
        "first_divergent_stage": record.first_divergent_stage,
        "findings": sorted([f.code, f.stage, f.severity] for f in record.findings),
        "output": None if output is None else np.asarray(output, dtype=np.float64).ravel().tolist(),
    }


def main() -> None:
    table = {}
    for variant in attnlab.list_variants():
        if variant in SKIPPED:
            continue
        for size in SIZES:
            table[f"{variant}@{size}"] = behaviour(variant, size)
            print(variant, size, table[f"{variant}@{size}"]["findings"], file=sys.stderr)
    Path(__file__).with_name("behaviour.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
