"""The full zoo survey: `variant=hf:TYPE` for every model type of the installed transformers, then
the published table and page (docs/reference/zoo.csv, zoo.md) replaced by this run's.

    OMP_NUM_THREADS=1 nice python benchmarks/zoo_survey.py --jobs 2      # ~25 min on 2 busy cores
    python benchmarks/zoo_survey.py --out runs/zoo-survey --no-publish   # a run kept out of the docs

Resumable: run it again on the same --out folder and only the types not yet surveyed run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "zoo-survey")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--no-publish", action="store_true", help="leave docs/reference/zoo.csv and zoo.md as they are")
    args = parser.parse_args()
    from attnlab.conformance.store import from_csv
    from attnlab.zoo import main as survey

    survey(["--out", str(args.out), "--jobs", str(args.jobs), "--timeout", str(args.timeout)])
    rows, version = from_csv((args.out / "zoo.csv").read_text())
    defining = [r for r in rows if r.defines_attention]
    counts = Counter(r.outcome for r in defining)
    print(f"transformers {version}: {len(rows)} types, {len(defining)} define attention; "
          + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print(f"ok with no error finding: {counts['ok']} of {len(defining)} ({100 * counts['ok'] / len(defining):.0f}%), "
          f"target >= 90%")
    if not args.no_publish:
        for name in ("zoo.csv", "zoo.md"):
            shutil.copyfile(args.out / name, REPO / "docs" / "reference" / name)


if __name__ == "__main__":
    sys.exit(main())
