"""`python -m attnlab.zoo`: survey every model type (resumable), write the CSV and the page;
`--models`: every causal-LM type as a whole small model instead (zoo_models.csv and zoo_models.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnlab.conformance.model_survey import ModelRow, causal_lm_types, models_csv
from attnlab.conformance.models_page import models_page
from attnlab.conformance.runner import all_types, run_survey
from attnlab.conformance.store import rows, to_csv
from attnlab.conformance.zoo_page import page
from attnlab.record.files import write_atomic


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m attnlab.zoo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("zoo_survey"), help="the survey's folder (resumed if it exists)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at a time")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one type may take")
    parser.add_argument("--types", default="", help="comma-separated model types (default: every type)")
    parser.add_argument("--table-only", action="store_true", help="rebuild zoo.csv and zoo.md from the rows on disk")
    parser.add_argument("--models", action="store_true",
                        help="whole small models of the causal-LM types (model.path=DIR layer=0): zoo_models.csv, .md")
    args = parser.parse_args(argv)
    import transformers

    if args.models:
        _models(args, transformers.__version__)
        return
    types = [t for t in args.types.split(",") if t] or all_types()
    if not args.table_only:
        run_survey(args.out, types, jobs=args.jobs, timeout=args.timeout)
    found = [r for r in rows(args.out) if r.type in set(types)]
    write_atomic(args.out / "zoo.csv", to_csv(found, transformers.__version__))
    write_atomic(args.out / "zoo.md", page(found, transformers.__version__))
    print(f"attnlab.zoo: {len(found)} types: {args.out / 'zoo.csv'}, {args.out / 'zoo.md'}", file=sys.stderr)


def _models(args: argparse.Namespace, version: str) -> None:
    types = [t for t in args.types.split(",") if t] or causal_lm_types()
    if not args.table_only:
        run_survey(args.out, types, jobs=args.jobs, timeout=args.timeout, worker=MODEL_WORKER)
    found = [r for r in rows(args.out, ModelRow) if r.type in set(types)]
    write_atomic(args.out / "zoo_models.csv", models_csv(found, version))
    write_atomic(args.out / "zoo_models.md", models_page(found, version))
    print(f"attnlab.zoo: {len(found)} model types: {args.out / 'zoo_models.csv'}, {args.out / 'zoo_models.md'}",
          file=sys.stderr)


MODEL_WORKER = "attnlab.conformance.model_worker"

if __name__ == "__main__":
    main()
