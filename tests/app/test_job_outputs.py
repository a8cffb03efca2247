"""A job's files unchanged by work on its speed: every file a single run and figure 2c's sweep
write (records, tables, pages, heatmap pixels, TensorBoard events) against the digests in
tests/golden/job_outputs.json, written by the code before that work (make_job_outputs.py says
what is compared and what is left out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.make_job_outputs import MACHINE, SINGLE_RUNS, digests, float_kernels, single_run, sweep

EXPECTED = json.loads((Path(__file__).parents[1] / "golden" / "job_outputs.json").read_text())
# A job's files are compared to the last bit: only where torch's kernels round as they did where the
# digests were written (other CPUs round float32 differently; the numbers are checked to tolerance
# by the behaviour tests there).
same_kernels = pytest.mark.skipif(
    EXPECTED.get(MACHINE, {}).get("float_kernels") != float_kernels(),
    reason="this CPU's float kernels round differently from the machine that wrote tests/golden/job_outputs.json "
           "(python tests/golden/make_job_outputs.py rewrites it here)")


def _differences(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str]]:
    return {"missing": sorted(set(before) - set(after)), "new": sorted(set(after) - set(before)),
            "changed": sorted(path for path in set(before) & set(after) if before[path] != after[path])}


@same_kernels
@pytest.mark.parametrize("case", sorted(SINGLE_RUNS))
def test_a_single_run_writes_the_files_it_wrote_before(case: str, tmp_path: Path) -> None:
    assert _differences(EXPECTED[case], single_run(case, tmp_path / case)) == {"missing": [], "new": [], "changed": []}


@same_kernels
@pytest.mark.slow
@pytest.mark.parametrize("isolation", [False, True], ids=["in-process", "job-worker"])
def test_a_sweep_writes_the_files_it_wrote_before(isolation: bool, tmp_path: Path) -> None:
    after = sweep(tmp_path / "sweep", isolation=isolation)
    assert _differences(EXPECTED["sweep"], after) == {"missing": [], "new": [], "changed": []}


@same_kernels
def test_the_comparison_sees_a_changed_pixel(tmp_path: Path) -> None:
    """The check can fail: one pixel of one heatmap changed is one changed file."""
    from PIL import Image

    case = "unscaled@book"
    single_run(case, tmp_path / case)
    png = tmp_path / case / "heatmaps" / "variant" / "weights.png"
    with Image.open(png) as image:
        image = image.copy()
    image.putpixel((0, 0), tuple(255 - c for c in image.getpixel((0, 0))))
    image.save(png)
    assert _differences(EXPECTED[case], digests(tmp_path / case))["changed"] == ["heatmaps/variant/weights.png"]
