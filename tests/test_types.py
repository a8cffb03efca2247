"""The type checker passes on the packages pyproject's [tool.mypy] lists: a regression fails the suite.

`python tests/test_types.py` prints each package's error count under strict on all of src/ (the
packages `files` does not list yet, and those a relaxing override still covers): the one place the
counts come from."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ERROR = re.compile(r"^src/(?:attnlab/)?([^/:]+)[/:].*: error:", re.MULTILINE)


@pytest.mark.slow
def test_mypy_passes_on_the_listed_packages(tmp_path: Path) -> None:
    # a cache of its own: the run reads the source as it is, and leaves nothing in the repository
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"
    assert "Success" in result.stdout


def strict_counts(folder: Path) -> Counter[str]:
    """{package (a top-level module counts as `attnlab`): its errors} with pyproject's settings on
    all of src/, without the overrides that relax strict (those that turn a strict flag off)."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    kept = [o for o in settings.pop("overrides", []) if "disallow_untyped_defs" not in o]
    settings.pop("files")
    lines = ["[mypy]", *_ini(settings)]
    for override in kept:
        lines += [f"[mypy-{','.join(override.pop('module'))}]", *_ini(override)]
    config = folder / "mypy.ini"
    config.write_text("\n".join(lines) + "\n")
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
                             str(folder / "cache"), "src/attnlab", "src/hydra_plugins"],
                            cwd=ROOT, capture_output=True, text=True, timeout=1800)
    return Counter("attnlab" if name.endswith(".py") else name for name in ERROR.findall(result.stdout))


def _ini(settings: dict[str, object]) -> list[str]:
    def value(v: object) -> str:
        return ",".join(map(str, v)) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)

    return [f"{key} = {value(v)}" for key, v in settings.items()]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        counts = strict_counts(Path(tmp))
    for name in sorted({p.name for p in (ROOT / "src" / "attnlab").iterdir() if (p / "__init__.py").exists()}
                       | {"attnlab", "hydra_plugins"}):
        print(f"{name:15} {counts[name]}")
    print(f"{'total':15} {sum(counts.values())}")
