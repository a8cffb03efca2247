# The checks a developer runs (docs/guide/development.md, "Test tiers"): `make lint types fast` before
# a commit, `make full` for what CI runs (.ci/run). PY is the project's venv (README's set-up).
PY ?= .venv/bin/python

.PHONY: lint types fast full docs

lint:
	$(PY) -m ruff check src tests benchmarks docs

types:
	$(PY) -m mypy

fast:
	$(PY) -m pytest -m "not slow" -n 2

full:
	$(PY) -m pytest -n 2

docs:
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -q
