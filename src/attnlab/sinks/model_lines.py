"""The terminal's lines for a run inside a model: the model, the layer, the effect on its output."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from attnlab.record import Effect, ModelInfo, Record
from attnlab.reporting.effect_grid import effect_grid

TABLE_COLUMNS = ("layer", "status", "first divergent", "KL mean", "KL max", "top-1", "loss", "findings")
MAX_FINDINGS = 10  # error findings printed in words under a table of layers
EFFECT_COLUMNS = ("KL mean", "KL max", "top-1", "loss")  # a variant in the model only; the learner's check has end_to_end


def _g(value: float | None, digits: int = 4) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def model_of(record: Record) -> ModelInfo:
    """The model a run inside a model ran in: these lines and pages are drawn for such runs only."""
    assert record.model is not None, "a run inside a model"
    return record.model


def model_line(record: Record) -> str:
    about = model_of(record)
    against = f" against {about.reference_model}" if about.reference_model else ""
    return (f"model: {about.model}{against} ({about.parameters / 1e6:.2f}M parameters, {about.n_layers} "
            f"layers, {about.heads} heads, {about.kv_heads} kv heads; tokens: {about.tokenizer})")


def inputs_given(record: Record) -> str:
    """What the attention ran on, as a header says it: an image classifier's patches (ViT's: the
    `inputs` config, the book by default, does not reach it), else the inputs config's kind."""
    if record.model is not None and record.model.positions:  # a classifier's one position: an image's
        return "image_patches"
    return str((record.config.get("inputs") or {}).get("kind"))


def effect_positions(record: Record) -> int:
    """The positions a variant's effect is over: every token's, or a classifier's one."""
    return model_of(record).positions or record.n_tokens


def effect_line(effect: Effect, n_tokens: int, title: str) -> str:
    n_tokens = effect.positions or n_tokens  # a padded batch's: its texts' tokens, never its pads
    clamped = effect.kl_clamped  # float32 rounding below 0, clamped by attnlab.model.effect
    rounding = f" (≥ 0: rounding to {clamped:.1e} clamped)" if clamped < 0 else ""
    count = f"{n_tokens} tokens" if n_tokens != 1 else "1 position"  # a classifier: its one class position
    return (f"{title} ({count}): KL mean {_g(effect.kl_mean)} · max {_g(effect.kl_max)}{rounding} · "
            f"top-1 agreement {_agreed(effect, n_tokens)}/{n_tokens} · loss {_g(effect.loss)} → "
            f"{_g(effect.loss_changed)} · final hidden max |Δ| {_g(effect.hidden_divergence)}"
            + (f" · {effect.non_finite_positions} positions not finite" if effect.non_finite_positions else "")
            + "".join(f" · {name} {_g(value)}" for name, value in (effect.metrics or {}).items()))


def _agreed(effect: Effect, n_tokens: int) -> int:
    """The positions whose top-1 agrees: a padded batch's summed over its texts (its share is their
    shares' mean, each text counting once), else the share of `n_tokens`."""
    if effect.positions and effect.batch_items:
        return sum(round(item.top1_agreement * (item.positions or 0)) for item in effect.batch_items)
    return round(effect.top1_agreement * n_tokens)


def layer_lines(record: Record) -> list[str]:
    """The model, the layer compared and what the change did to the model's output."""
    lines = [model_line(record), f"layer {model_of(record).layer_name} of {model_of(record).n_layers}: "
                                 f"{model_of(record).attention} against {record.reference.name}"]
    effect = model_of(record).effect
    if effect is not None and effect.batch_items:  # a batch of texts: over all of them, then each
        n_texts = len(effect.batch_items)
        lines.append(effect_line(effect, n_texts * effect_positions(record), f"effect on the model's output, "
                                                                             f"{n_texts} texts"))
        lines += [effect_line(item, effect_positions(record), f"  text {i}") for i, item in enumerate(effect.batch_items)]
    elif effect is not None:
        lines.append(effect_line(effect, effect_positions(record), "effect on the model's output"))
    end_to_end = model_of(record).end_to_end
    if end_to_end is not None:
        lines.append(effect_line(end_to_end, record.n_tokens,
                                 "end to end, your model against the reference model (loss: reference → yours)"))
    return lines + head_grid_lines([record])


def head_grid_lines(records: Sequence[Record]) -> list[str]:
    """A run of one edit per head (intervene.head=all): each edit's mean KL, a row per layer, and the largest."""
    if not any(model_of(r).edited_heads is not None for r in records):
        return []
    found = effect_grid(records)
    if found is None:
        return []
    layers, heads, grid = found
    rows = [["layer", *map(str, heads)], *([layer, *map(_g, row)] for layer, row in zip(layers, grid.tolist()))]
    widths = [max(map(len, column)) for column in zip(*rows)]
    lines = ["each edit's mean KL, one head at a time (a row per layer, a column per head; one forward per "
             "edit measured its effect; the stages shown are the layer's own, unedited):"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if not np.isnan(grid).all():
        at = divmod(int(np.nanargmax(grid)), len(heads))
        lines.append(f"  largest: layer {layers[at[0]]} head {heads[at[1]]} ({_g(float(grid[at]))})")
    return lines


def _row(record: Record, metrics: Sequence[str] = ()) -> tuple[str, ...]:
    """`metrics`: the user's (intervene.metric), a column each before the findings."""
    effect = model_of(record).effect
    findings = " ".join(sorted({f"{f.code}@{f.stage}" for f in record.findings})) or "—"
    if effect is None:
        numbers = ("—", "—", "—", "—")
    else:
        numbers = (_g(effect.kl_mean), _g(effect.kl_max), f"{effect.top1_agreement:.0%}",
                   f"{_g(effect.loss)} → {_g(effect.loss_changed)}")
    measured = [_g(((effect.metrics if effect else None) or {}).get(name)) for name in metrics]
    return (model_of(record).layer_name, record.status, record.first_divergent_stage or "none", *numbers, *measured,
            findings if record.ok else (record.error or "")[:60])


def layer_table(records: Sequence[Record]) -> list[list[str]]:
    """The per-layer table, its header first: the terminal prints it, the HTML pages show it."""
    metrics = list(next((e.metrics for e in (model_of(r).effect for r in records) if e and e.metrics), {}))
    header = (*TABLE_COLUMNS[:-1], *metrics, TABLE_COLUMNS[-1])
    keep = [i for i, name in enumerate(header)
            if name not in EFFECT_COLUMNS or any(model_of(r).effect is not None for r in records)]
    return [[row[i] for i in keep] for row in [header, *(_row(r, metrics) for r in records)]]


def print_layers(records: Sequence[Record], table_path: Path | None, records_glob: str, out: TextIO) -> None:
    """A line per layer, then the end-to-end effect where the run checked a model against another."""
    first = records[0]
    print(model_line(first), file=out)
    print(f"variant={first.variant.name} inputs={inputs_given(first)} n_tokens={first.n_tokens} layers="
          f"{','.join(model_of(r).layer_name for r in records)}", file=out)
    rows = layer_table(records)
    widths = [max(map(len, column)) for column in zip(*rows)]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)
    errors = [(model_of(r).layer_name, f) for r in records for f in r.findings if f.severity == "error"]
    for layer, finding in errors[:MAX_FINDINGS]:
        print(f"  layer {layer}: [{finding.code} @ {finding.stage}] {finding.message}", file=out)
    if len(errors) > MAX_FINDINGS:
        print(f"  … {len(errors) - MAX_FINDINGS} more findings in the records", file=out)
    for line in head_grid_lines(records):
        print(line, file=out)
    end_to_end = model_of(first).end_to_end
    if end_to_end is not None:
        print(effect_line(end_to_end, first.n_tokens,
                          "end to end, your model against the reference model (loss: reference → yours)"), file=out)
    if table_path is not None:
        print(f"table: {table_path}", file=out)
    print(f"records: {records_glob}", file=out)
