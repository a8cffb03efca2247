"""The diagnosis: which stage went wrong first, and why, in words a learner understands.

Runs the declared checks (attnlab.diagnosis.codes) in their order over one read-only context,
drops what an earlier finding suppresses, refuses a code its check did not declare, and locates it
on the heads and batch items where its stage differs from the reference. Two kinds of check:

- self-consistent ones read only the variant (its sources, scaling factor, weight sums, shapes,
  its own batched-vs-single-token agreement) and always run;
- comparisons with the reference run only with shared weights, and only until a finding
  explains a divergence: a wrong early stage makes every later one wrong, and reporting those
  consequences would bury the root cause.

One rule holds for every check: a stage attnlab cannot place is named "not observable" (info) and
never compared; and with shared weights no error is reported at a stage when no stage from there
on that attnlab can place differs from the reference (nothing it can prove differs is there).
"""

from __future__ import annotations

from dataclasses import replace

from attnlab.capture.spill import release
from attnlab.capture.stages import AXES, STAGES
from attnlab.diagnosis.codes import CHECKS, SUPPRESSES
from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import Code, DeclaredCheck
from attnlab.record import Finding


def run_checks(ctx: Context) -> list[Finding]:
    """The findings of every check, in order; suppressed codes dropped."""
    found, suppressed = Found(), set[str]()
    for check in CHECKS:
        if {c.code for c in check.codes} <= suppressed:
            continue
        try:
            new = check(ctx, found)
        finally:
            release(ctx.v, ctx.ref)  # give back the pages it read of stages spilled to disk
        for f in new:
            declared = _declared(check, f)
            unproven = declared.severity == "error" and ctx.shared and not ctx.differs_from(f.stage)
            if f.code not in suppressed and not unproven:
                found = found.plus(f, declared.explains)
                suppressed.update(SUPPRESSES.get(f.code, ()))
    return list(found.findings)


def _declared(check: DeclaredCheck, f: Finding) -> Code:
    """The code a check's finding was declared with: a code it did not declare is a bug in the check."""
    declared = next((c for c in check.codes if c.code == f.code), None)
    if declared is None or declared.severity != f.severity:
        raise AssertionError(f"{check.name} returned {f.code} ({f.severity}), which it does not declare")
    return declared


def diagnose_context(ctx: Context) -> list[Finding]:
    """Findings, root cause first, each with the heads and batch items it holds for; a variant that
    matches the reference gets none (attnlab.diagnosis.analysis builds the context)."""
    release(ctx.v, ctx.ref)
    order = {s: i for i, s in enumerate(STAGES)}
    located = [_locate(ctx, f) for f in run_checks(ctx)]
    release(ctx.v, ctx.ref)
    return sorted(located, key=lambda f: (order[f.stage], f.severity != "error"))  # a bug before a note


def _locate(ctx: Context, finding: Finding) -> Finding:
    """Fill in the heads and batch items a finding holds for: where the stage differs from the
    reference (all of them when nothing was compared); None where the module has no such axis."""
    mine = ctx.v.stages.get(finding.stage)
    native = ctx.v.native_shapes.get(finding.stage)
    if mine is None or native is None:
        return finding
    if finding.stage in ctx.v.unobservable:
        return replace(finding, heads=None, batch=None)  # its axes are not the heads and batch items
    per_head = "heads" in AXES[finding.stage] or "kv_heads" in AXES[finding.stage]
    has_batch = len(native) >= 3
    has_heads = per_head and (len(native) == 4 or mine.shape[1] > 1)
    splitting = finding.code in ("head_split", "head_merge")
    heads = finding.heads if finding.heads is not None or splitting else (
        list(range(mine.shape[1])) if has_heads else None)
    batch = finding.batch if finding.batch is not None else (list(range(mine.shape[0])) if has_batch else None)
    ref = ctx.ref.stages.get(finding.stage)
    explicit = finding.heads is not None or finding.batch is not None
    if not explicit and not splitting and ctx.shared and ref is not None and ref.shape == mine.shape:
        tol = ctx.tolerance(finding.stage)
        grid = [[not diff <= tol for diff in row] for row in ctx.grids[finding.stage]]
        rows = [b for b, row in enumerate(grid) if any(row)]
        if rows:
            batch = rows if has_batch else None
            if has_heads:
                heads = [h for h in range(mine.shape[1]) if any(row[h] for row in grid)]
    return replace(finding, heads=heads if has_heads or finding.heads is not None else None,
                   batch=batch if has_batch else None)

