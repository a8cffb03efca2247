"""What the sinks show alike, in words: a record without findings, its shapes against their
predictions, its findings as an HTML list. Sinks read these (never each other), so the terminal,
the pages and the notebook say one thing one way."""

from __future__ import annotations

import html

from attnlab.capture.stages import STAGES
from attnlab.record import Record


def no_findings_message(record: Record) -> str:
    """What a record without findings means, in one sentence: a match, or a difference that no
    check of the variant's own stages calls a bug (as with weights=native)."""
    unchecked = [s for s in record.missing_stages if s != "weights_applied"]
    if unchecked:
        return (f"no findings in the stages checked; not checked: {', '.join(unchecked)} (not captured: "
                f"the module computes them where attnlab cannot see; attnlab.tap(stage, tensor) hands them over)")
    if record.first_divergent_stage is None:
        return "no findings: the variant matches the reference at every stage checked"
    why = " (weights=native: each module built its own parameters)" if record.config.get("weights") == "native" else ""
    return (f"no findings: values differ from the reference from {record.first_divergent_stage} on{why}, "
            "but every check of the variant's own stages passed")


def predicted_shape(stage: str, record: Record) -> tuple[int, ...] | None:
    """The shape the reference has (the prediction the record carries), in its own rank."""
    shape = record.expected_shapes.get(stage)
    return tuple(shape) if shape is not None else None


def shape_trace(record: Record) -> str:
    parts = []
    for stage in STAGES:
        shape = record.variant.shapes.get(stage)
        if stage == "output" and record.output_is_context:
            parts.append("output = context")
            continue
        if shape is None:
            if stage != "weights_applied" or stage in record.missing_stages:
                parts.append(f"{stage} (missing)")
            continue
        predicted = predicted_shape(stage, record)
        mark = "" if predicted is None or tuple(shape) == predicted else f" ✗ predicted {predicted}"
        rebuilt = " (reconstructed)" if stage in record.reconstructed_stages else ""
        parts.append(f"{stage} {tuple(shape)}{rebuilt}{mark}")
    return "shapes: " + " · ".join(parts)


def findings_html(records: list[Record]) -> str:
    """Each distinct finding once, in words, with the seeds it came from (or each failure)."""
    items: dict[tuple[str, str], list[int]] = {}
    for record in records:
        if not record.ok:
            items.setdefault(("error", f"failed: {record.error}"), []).append(record.seed)
        for finding in record.findings:
            text = f"[{finding.code} @ {finding.stage}] {finding.message}"
            items.setdefault((finding.severity, text), []).append(record.seed)
    if not items:
        return f"<p>{html.escape(no_findings_message(records[0]).capitalize())}.</p>"
    several = len({r.seed for r in records}) > 1
    lines = [
        f'<li class="{html.escape(severity)}">{html.escape(text)}'
        + (f' <span class="note">(seed {", ".join(map(str, seeds))})</span>' if several else "") + "</li>"
        for (severity, text), seeds in items.items()
    ]
    return "<ul>" + "".join(lines) + "</ul>"


__all__ = ["findings_html", "no_findings_message", "predicted_shape", "shape_trace"]
