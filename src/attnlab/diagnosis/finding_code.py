"""A finding code declared once, beside the check that finds it, as ruff declares a rule in its rule
file: where it is reported, how severe it is, what it means, the words of its message (a template
of named facts) and the paragraph that documents it (docs/guide/checks.md is generated from these).

A check says which codes it may return with `@finds(...)`; `attnlab.diagnosis.codes` lists the
checks in the order they run and what each code suppresses.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from attnlab.diagnosis.context import Check, Context, Found
from attnlab.diagnosis.message_format import fmt
from attnlab.record import Finding

Severity = Literal["error", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "info")  # a bug; deliberate, or not a bug
FIRST_WHERE_IT_SHOWS: tuple[str, ...] = ()  # `stages` of a code reported at whichever stage it first shows
TABLES = ("book", "heads", "deliberate", "layouts")  # the tables of docs/guide/checks.md, in the page's order
MODEL_TABLE = "model"  # a run inside a model's codes (attnlab.model.finding_codes): docs/reference/codes.md's own table


class _Facts(string.Formatter):
    """A template's named facts as a message writes them: a float through `fmt` unless the
    template gives its own format (`{eps:.3g}`)."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, float) and not format_spec:
            return fmt(value)
        return str(super().format_field(value, format_spec))


_FACTS = _Facts()


@dataclass(frozen=True, eq=False)
class Code:
    code: str
    stages: tuple[str, ...]  # where it may be reported; FIRST_WHERE_IT_SHOWS: the first stage that shows it
    severity: Severity
    meaning: str  # one line
    message: str | Mapping[str, str]  # the finding's words: a template of named facts, or one per case
    doc: str  # the paragraph that documents it, in markdown
    shown_by: tuple[str, ...]  # built-in variants that trigger it, or the tests (path::name) that do
    table: str  # which of TABLES documents it
    explains: bool = True  # found, it explains why later stages differ: comparisons after it stop

    def templates(self) -> tuple[str, ...]:
        return (self.message,) if isinstance(self.message, str) else tuple(self.message.values())

    def __call__(self, at: str, case: str = "", /, *, heads: list[int] | None = None,
                 batch: list[int] | None = None, **facts: Any) -> Finding:
        """A finding of this code at stage `at`, its message the template (of `case`) filled with `facts`."""
        template = self.message if isinstance(self.message, str) else self.message[case]
        return Finding(self.code, at, self.severity, _FACTS.format(template, **facts), heads, batch)


@dataclass(frozen=True)
class DeclaredCheck:
    """A check with the codes it may return."""

    run: Check
    codes: tuple[Code, ...]

    @property
    def name(self) -> str:
        return f"{self.run.__module__}.{getattr(self.run, '__name__', '?')}"

    def __call__(self, ctx: Context, found: Found) -> list[Finding]:
        return self.run(ctx, found)


def finds(*codes: Code) -> Callable[[Check], DeclaredCheck]:
    """Declare the codes a check may return (the runner refuses any other)."""

    def declare(check: Check) -> DeclaredCheck:
        return DeclaredCheck(check, codes)

    return declare
