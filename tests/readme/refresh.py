"""Rewrite the guide's shown outputs from real runs: `python tests/readme/refresh.py`.

Runs every example the README test runs (the README, then the guide pages, in one temporary
folder, in that order) and puts what each command printed in place of what the page showed,
keeping each `...` where it was.
Examples marked "not run in tests" are left as they are. Review the diff before committing."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.readme.examples import fresh_folder, guide, guide_examples, rewrite, run_all  # noqa: E402


def main() -> None:
    found = guide_examples()
    with tempfile.TemporaryDirectory(prefix="attnlab-readme-") as tmp:
        run_all(found, fresh_folder(Path(tmp)))
    for path in guide():
        text = path.read_text(encoding="utf-8")
        path.write_text(rewrite(text, [e for e in found if e.path == path]), encoding="utf-8")
    for example in found:
        if example.not_run:
            print(f"not run: {example.name} ({example.not_run})")


if __name__ == "__main__":
    main()
