"""Rewrite the README's shown outputs from real runs: `python tests/readme/refresh.py`.

Runs every example the README test runs (in a temporary folder, in README order) and puts what
each command printed in place of what the README showed, keeping each `...` where it was.
Examples marked "not run in tests" are left as they are. Review the diff before committing."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.readme.examples import README, examples, fresh_folder, rewrite, run_all  # noqa: E402


def main() -> None:
    text = README.read_text(encoding="utf-8")
    found = examples(text)
    with tempfile.TemporaryDirectory(prefix="attnlab-readme-") as tmp:
        run_all(found, fresh_folder(Path(tmp)))
    README.write_text(rewrite(text, found), encoding="utf-8")
    for example in found:
        if example.not_run:
            print(f"not run: {example.name} ({example.not_run})")


if __name__ == "__main__":
    main()
