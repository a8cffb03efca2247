"""Which heatmaps a job draws, and where they are kept: PNG files beside record.json.

Drawn is what is read: the weights, the context and the output always, the scores and scaled
scores where the variant differs from the reference there, and any stage the first divergence
or a finding names (`head_merge @ output`, `projection @ queries`); for each, the variant and the
reference on one shared colour scale, and their difference (symmetric around 0) where it is not
all zero. The scale is chosen for the stage and said in each map's legend: weights on 0 to 1 in
every map (so a sweep's cards share it) beside a log view (`heatmaps/<source>/weights_log`, 1e-4
to 1, the reference's where it differs: the structure of a 1,024-token map, where row 0 of a
causal map is 1 and the rest is near 0), zeros (masked keys) grey; scores with their masked cells grey,
whatever the fill (-inf, GPT-2's torch.finfo(dtype).min, -1e9, -1e4: attnlab.diagnosis.masking.fill_masked),
on the percentiles of the unmasked cells of variant and reference (ROBUST_PERCENTILES: an extreme score
does not flatten the rest); others min to max.
A stage with several heads is a grid of all heads (tag `heatmaps/<source>/<stage>`) and an image
per head (`.../head<h>`: of the weights, and of any stage where the variant differs); above MAX_SIDE tokens the shown head's CROP x CROP block where the
variant first differs (the first block without a difference) follows at full resolution
(`.../crop64`, its rows and columns in its second title line). Where the variant equals the
reference, the reference gets its grid only (its heads would be the variant's images again).
Titles name the stage, the source, the head and the batch item.

`job_heatmaps` writes them to `<job>/heatmaps/<tag after heatmaps/>.png` with `index.json`
(each image's tag, file and size, and the record.json they were drawn from): TensorBoard,
MLflow and the HTML report show the same files, drawn once per job by whichever sink asks first.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch

from attnlab.capture.spill import release
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.masking import fill_masked
from attnlab.drawing.parallel import in_threads
from attnlab.drawing.png import to_png_bytes
from attnlab.record import Record, write_atomic
from attnlab.reporting.heatmap import (
    CROP,
    LOG_FLOOR,
    MAX_SIDE,
    ROBUST_PERCENTILES,
    _as_heads,
    _tensor,
    finite_range,
    grid_pooling,
    render_head_grid,
    render_heatmap,
    robust_range,
)

HEATMAP_STAGES = ("queries", "keys", "values", "scores", "scaled_scores", "weights", "context", "output")
ALWAYS_DRAWN = ("weights", "context", "output")  # the others where they differ or a finding names them
WHERE_DIFFERENT = ("scores", "scaled_scores")
TOKEN_BY_TOKEN = {"scores", "scaled_scores", "weights"}  # columns are key tokens; context's are dims
SCORE_SIZED = {"scores", "scaled_scores"}
LOG_SUFFIX = "_log"  # the weights' log view: `heatmaps/<source>/weights_log`
FOLDER = "heatmaps"
INDEX_FILE = "index.json"


@dataclass(frozen=True)
class EncodedHeatmap:
    png: bytes
    height: int
    width: int


class _EncodedCache:
    """Encoded images by content, least recently used first, within a budget of PNG bytes."""

    def __init__(self, budget: int):
        self.budget, self.size = budget, 0
        self.entries: OrderedDict[bytes, EncodedHeatmap] = OrderedDict()

    def get(self, key: bytes) -> EncodedHeatmap | None:
        if key in self.entries:
            self.entries.move_to_end(key)
        return self.entries.get(key)

    def put(self, key: bytes, image: EncodedHeatmap) -> None:
        self.entries[key] = image
        self.size += len(image.png)
        while self.size > self.budget:
            self.size -= len(self.entries.popitem(last=False)[1].png)


# The jobs of a sweep that share a seed draw the same reference maps, and the basic launcher runs
# them in one process; the key hashes everything drawn, so a hit is the image a call would draw.
_ENCODED = _EncodedCache(budget=64 * 2**20)
CACHED_MAX_ELEMENTS = 65_536  # larger maps are drawn each time: hashing them costs more than drawing


def encoded(draw: Callable[[], np.ndarray], values: np.ndarray, *key_parts: object) -> EncodedHeatmap:
    """`draw()` PNG-encoded, remembered by the content of `values` and `key_parts` when small."""
    return encoding(draw, values, *key_parts).result()


def encoding(draw: Callable[[], np.ndarray], values: np.ndarray, *key_parts: object,
             encoder: Executor | None = None) -> Future[EncodedHeatmap]:
    """As `encoded`, the PNG encoding on `encoder` when given: zlib lets go of the GIL, so a map
    is compressed while the next one is drawn."""
    key = None
    if values.size <= CACHED_MAX_ELEMENTS:
        digest = hashlib.blake2b(repr((values.shape, key_parts)).encode(), digest_size=20)
        # numpy's stubs give an array the buffer protocol from Python 3.12 on; checked as 3.11
        digest.update(np.ascontiguousarray(values, dtype=np.float32))  # type: ignore[arg-type]
        key = digest.digest()
        hit = _ENCODED.get(key)
        if hit is not None:
            return _done(hit)
    image = draw()
    return encoder.submit(_encode, image, key) if encoder is not None else _done(_encode(image, key))


def _encode(image: np.ndarray, key: bytes | None) -> EncodedHeatmap:
    result = EncodedHeatmap(to_png_bytes(image), image.shape[0], image.shape[1])
    if key is not None:
        _ENCODED.put(key, result)
    return result


def _done(image: EncodedHeatmap) -> Future[EncodedHeatmap]:
    future: Future[EncodedHeatmap] = Future()
    future.set_result(image)
    return future


@dataclass(frozen=True)
class Scale:
    """A map's colour scale: its range (log10 units for `log`), how it was chosen, in words, and
    whether zeros are grey (weights: a masked key)."""

    value_range: tuple[float, float]
    legend: str
    log: bool = False
    zero_grey: bool = False


def stage_scale(stage: str, *arrays: np.ndarray | None) -> Scale:
    """The scale of a stage's variant and reference maps (both passed: one scale for both)."""
    low, high = finite_range(*arrays)
    if stage == "weights" and low >= 0:
        top = max(high, 1.0)  # a variant whose weights exceed 1 gets its own top, and says so
        return Scale((0.0, top), f"linear 0 to {top:.3g} ({_shared(top)}); grey: 0 (masked)", zero_grey=True)
    if stage in SCORE_SIZED:  # masked cells are -inf here (masked_as_neg_inf): grey, outside the percentiles
        p_low, p_high = ROBUST_PERCENTILES
        masked = any(a is not None and bool(np.isneginf(a).any()) for a in arrays)
        cells = ", unmasked; grey: masked" if masked else ""
        return Scale(robust_range(*arrays), f"linear p{p_low:g} to p{p_high:g} of variant and reference{cells}")
    return Scale((low, high), "linear min to max of variant and reference")


def log_scale(weights: Scale) -> Scale:
    """The log view of the weights' scale (stage_scale's, with its top): LOG_FLOOR to the top."""
    top = weights.value_range[1]
    return Scale((LOG_FLOOR, float(np.log10(top))), f"log 1e{LOG_FLOOR:.0f} to {top:.3g} ({_shared(top)}); "
                 "grey: 0 (masked)", log=True, zero_grey=True)


def _shared(top: float) -> str:
    return "every weights map" if top == 1.0 else "variant and reference"


def difference_scale(difference: np.ndarray) -> Scale:
    """The finite differences' symmetric range; grey cells (a key masked on one side only: an
    infinity minus a number) named in the legend, counted, since the bar shows finite values only."""
    legend = "variant - reference, symmetric about 0"
    grey = unmatched_masks(difference)
    return Scale(finite_range(difference, diverging=True), f"{legend}; grey: {grey}" if grey else legend)


def unmatched_masks(difference: np.ndarray) -> str:
    """`12 -inf (masked in variant only), 3 +inf (in reference only), 1 nan`: the non-finite cells
    of a difference, by what each means; empty when every cell is finite."""
    counts = [(int(np.count_nonzero(np.isneginf(difference))), "-inf (masked in variant only)"),
              (int(np.count_nonzero(np.isposinf(difference))), "+inf (in reference only)"),
              (int(np.count_nonzero(np.isnan(difference))), "nan")]
    return ", ".join(f"{count} {what}" for count, what in counts if count)


def drawn_stages(record: Record) -> list[str]:
    """The stages a record's pictures show, in the order of the forward pass."""
    named = _named_stages(record)
    return [stage for stage in HEATMAP_STAGES if stage in record.variant.shapes
            and not (stage == "output" and record.output_is_context)  # the same matrix: drawn once, as context
            and (stage in ALWAYS_DRAWN or stage in named or (stage in WHERE_DIFFERENT and _differs(record, stage)))]


def _named_stages(record: Record) -> set[str | None]:
    """The stages a finding or the first divergence names: drawn, and drawn head by head."""
    return {f.stage for f in record.findings} | {record.first_divergent_stage}


def heatmap_images(record: Record, *, card_only: bool = False, stages: list[str] | None = None,
                   per_head: bool = True) -> list[tuple[str, EncodedHeatmap]]:
    """(tag, PNG) of every heatmap of the record (see the module's docstring), stage by stage;
    `card_only`: the variant's weights alone (`heatmaps/variant/weights` and its log view), the
    pictures an HTML card shows, for a job that draws no other heatmap (log.images=false);
    `stages`: only these (of those drawn_stages draws); `per_head=False`: no image per head
    (grids and crops: a notebook's inline view)."""
    with ThreadPoolExecutor(max_workers=1) as encoder:  # one thread beside the drawing; none outlives the call
        pending = (_card_image(record, encoder) if card_only
                   else _stage_maps(record, encoder, stages, per_head))
        return [(tag, image.result()) for tag, image in pending]


def _stage_maps(record: Record, encoder: Executor, stages: list[str] | None,
                per_head: bool) -> list[tuple[str, Future[EncodedHeatmap]]]:
    show = record.config.get("show") or {}
    batch, head = int(show.get("batch", 0)), int(show.get("head", 0))
    images: list[tuple[str, Future[EncodedHeatmap]]] = []
    named = _named_stages(record)
    for stage in drawn_stages(record):
        if stages is not None and stage not in stages:
            continue
        differs = _differs(record, stage)
        variant = record.variant.heads_view(stage, batch=batch)
        reference = record.reference.heads_view(stage, batch=batch)
        if stage in SCORE_SIZED:
            variant, reference = masked_as_neg_inf(variant), masked_as_neg_inf(reference)
        # one scale: a colour is one value in both maps (a reference equal to the variant has its range)
        scale = stage_scale(stage, variant, *([reference] if differs else []))
        sources = {"variant": (variant, scale, False), "reference": (reference, scale, False)}
        difference = _difference(variant, reference) if differs else None
        if difference is not None and np.any(difference):
            sources["difference"] = (difference, difference_scale(difference), True)
        where = f" · batch item {batch}" if _batched(record, stage) else ""
        origin = _crop_origin(difference, head)
        variant_pooled = None
        for source, (values, source_scale, diverging) in sources.items():
            if values is None:
                continue
            # a reference equal to the variant: its grid to compare by eye, not every head again;
            # a stage other than the weights where nothing differs: its grid (and crop) alone
            copy = not differs and source == "reference"
            heads = per_head and not copy and (differs or stage == "weights" or stage in named)
            # pooled once: for the grid and its log view; an equal reference's is the variant's
            multi = _as_heads(values).shape[0] > 1
            pooled = variant_pooled if copy else grid_pooling(values, diverging) if multi else None
            variant_pooled = pooled if source == "variant" else variant_pooled
            images += _stage_images(record, stage, source, values, source_scale, diverging, head, where, heads,
                                    not copy, origin, encoder, pooled)
            if stage == "weights" and source_scale.zero_grey and not diverging and not copy:
                images += _stage_images(record, stage, source, values, log_scale(source_scale), False, head, where,
                                        False, False, origin, encoder, pooled)
        release(variant, reference)  # pages of stages spilled to disk, read for this stage's maps (drawn maps are copies)
    return images


def masked_as_neg_inf(scores: np.ndarray | None) -> np.ndarray | None:
    """A score-sized stage (.., query, key) with its masked cells at -inf, whatever the fill put there
    (itself where every mask already is -inf): grey in a map, outside its colour scale, and the same
    cell masked on both sides is no difference."""
    if scores is None or np.ndim(scores) < 2:
        return scores
    values = _tensor(scores)
    masked = fill_masked(values) & torch.isfinite(values)
    if not bool(masked.any()):
        return scores
    return values.masked_fill(masked, -math.inf).numpy()


def _card_image(record: Record, encoder: Executor) -> list[tuple[str, Future[EncodedHeatmap]]]:
    batch = int((record.config.get("show") or {}).get("batch", 0))
    weights = record.variant.heads_view("weights", batch=batch)
    if weights is None:
        return []
    where = f" · batch item {batch}" if _batched(record, "weights") else ""
    scale = stage_scale("weights", weights)
    scales = [scale, log_scale(scale)] if scale.zero_grey else [scale]
    images = []
    for shown in scales:
        images += _stage_images(record, "weights", "variant", weights, shown, False, 0, where, False, False,
                                (0, 0), encoder)
    release(weights)
    return images


def _differs(record: Record, stage: str) -> bool:
    """Whether `stage` differs from the reference's, as the record's diagnosis says: a stage before
    its first divergent stage (every stage, when none diverges) is equal within the tolerance of
    its dtype, and a difference map of that rounding would paint float noise as saturated cells."""
    first = record.first_divergent_stage
    if record.ok and (first is None or (first in STAGES and stage in STAGES and STAGES.index(stage) < STAGES.index(first))):
        return False
    value = record.variant.diagnostics.get(f"divergence_{stage}")
    return value is None or not value == 0  # NaN or missing: cannot tell, draw it


def _batched(record: Record, stage: str) -> bool:
    shape = record.variant.shapes.get(stage) or []
    return len(shape) >= 3


def _difference(variant: np.ndarray | None, reference: np.ndarray | None) -> np.ndarray | None:
    if variant is None or reference is None or np.shape(variant) != np.shape(reference):
        return None
    with np.errstate(invalid="ignore"):  # a mask's -inf against the same -inf
        difference: np.ndarray = np.subtract(variant, reference, dtype=np.float32)
    np.putmask(difference, np.equal(variant, reference), 0.0)  # in place: one stage-sized array
    return difference


def _crop_origin(difference: np.ndarray | None, head: int) -> tuple[int, int]:
    """The corner of the CROP x CROP block where the shown head first differs (row by row, then
    its first differing column), on CROP's grid; (0, 0) when nothing differs."""
    if difference is None:
        return 0, 0
    heads = _as_heads(difference)
    matrix = heads[min(head, heads.shape[0] - 1)]
    if max(matrix.shape) <= MAX_SIDE:
        return 0, 0
    differing = np.argwhere(matrix != 0)  # NaN != 0: a NaN is a difference
    if not len(differing):
        return 0, 0
    row, col = differing[0]
    return int(row) // CROP * CROP, int(col) // CROP * CROP


class _Drawing(TypedDict):
    """How a stage's maps are drawn: render_heatmap's and render_head_grid's shared options."""

    diverging: bool
    value_range: tuple[float, float] | None
    scale: str
    legend: str | None
    zero_grey: bool
    axes: tuple[str, str] | None


def _stage_images(record: Record, stage: str, source: str, values: np.ndarray, scale: Scale,
                  diverging: bool, head: int, where: str, per_head: bool, crop: bool, origin: tuple[int, int],
                  encoder: Executor, pooled: tuple[np.ndarray, tuple[int, int]] | None = None,
                  ) -> list[tuple[str, Future[EncodedHeatmap]]]:
    """The grid of all heads (from `pooled`, grid_pooling's, when given) and (`per_head`) an image
    per head (one image for one head), then (`crop`) the shown head's crop at `origin`; a log
    scale: the grid (or the map) alone."""
    heads = _as_heads(values)  # (heads, rows, cols)
    rows, cols = _labels(record, stage, heads.shape[1:], one_row=np.ndim(values) == 1)
    axes = ("queries", "keys" if stage in TOKEN_BY_TOKEN else "features") if np.ndim(values) > 1 else None
    tag = f"heatmaps/{source}/{stage}{LOG_SUFFIX if scale.log else ''}"
    n = heads.shape[0]
    head = min(head, n - 1)
    options = _Drawing(diverging=diverging, value_range=scale.value_range, scale="log" if scale.log else "linear",
                       legend=scale.legend, zero_grey=scale.zero_grey, axes=axes)
    key = tuple(sorted((k, repr(v)) for k, v in options.items()))
    view = " · log" if scale.log else ""

    def single(h: int, matrix: np.ndarray, at: tuple[int, int] = (0, 0), region: str | None = None,
               suffix: str = "") -> Callable[[], Future[EncodedHeatmap]]:
        who = f" · head {h}" if n > 1 else ""
        title = f"{stage} · {source}{who}{where}{view}{suffix}"
        r, c = at
        row_labels = rows and rows[r:r + len(matrix)]
        col_labels = cols and cols[c:c + matrix.shape[-1]]
        return lambda: encoding(lambda: render_heatmap(matrix, title=title, row_labels=row_labels, col_labels=col_labels,
                                                       region=region, first_index=at, **options),
                                matrix, "map", title, row_labels, col_labels, region, at, key, encoder=encoder)

    tasks: list[tuple[str, Callable[[], Future[EncodedHeatmap]]]] = []
    if n == 1:
        tasks.append((tag, single(0, heads[0])))
    else:
        title = f"{stage} · {source} · all heads{where}{view}"
        tasks.append((tag, lambda: encoding(lambda: render_head_grid(heads, title=title, pooled=pooled, **options),
                                            heads, "grid", title, key, encoder=encoder)))
        tasks += [(f"{tag}/head{h}", single(h, heads[h])) for h in range(n) if per_head]
    if max(heads.shape[1:]) > MAX_SIDE and crop and not scale.log:
        r, c = origin
        block = np.ascontiguousarray(heads[head, r:r + CROP, c:c + CROP])
        region = (f"rows {r}-{r + block.shape[0] - 1} x cols {c}-{c + block.shape[1] - 1} "
                  f"of {heads.shape[1]}x{heads.shape[2]}, full resolution")
        tasks.append((f"{tag}/crop{CROP}", single(head, block, (r, c), region, " · crop")))
    return list(zip([t for t, _ in tasks], in_threads(lambda task: task[1](), tasks)))


def _labels(record: Record, stage: str, shape: tuple[int, int], *, one_row: bool) -> tuple[list[str] | None, list[str] | None]:
    """Token labels for the axes that are tokens (when they match), `d<i>` for context's columns."""
    n_rows, n_cols = shape

    def tokens(n: int) -> list[str] | None:
        return list(record.labels) if len(record.labels) == n else None

    rows = None if one_row else tokens(n_rows)
    cols = tokens(n_cols) if stage in TOKEN_BY_TOKEN else [f"d{i}" for i in range(n_cols)]
    return rows, cols


def job_heatmaps(record: Record, job_dir: Path, *, card_only: bool = False) -> list[tuple[str, EncodedHeatmap]]:
    """The record's heatmaps, as files in `<job_dir>/heatmaps/`: read back when already drawn from
    this very record.json (another sink of the job asked first), else drawn and written.
    `card_only`: the one picture an HTML card needs (heatmap_images); every image holds it."""
    folder = Path(job_dir) / FOLDER
    source = _source(record)
    index = read_index(job_dir)
    enough = index is not None and (card_only or not index.get("card_only", False))
    if source is not None and enough and index is not None and index.get("record") == source:
        try:
            return [(item["tag"], EncodedHeatmap((folder / item["file"]).read_bytes(), item["height"], item["width"]))
                    for item in index["images"]]
        except OSError:
            pass  # a file went missing: draw again
    images = heatmap_images(record, card_only=card_only)
    if folder.exists():
        shutil.rmtree(folder)
    items = []
    for tag, image in images:
        file = tag.removeprefix(f"{FOLDER}/") + ".png"
        write_atomic(folder / file, image.png)  # never a truncated PNG: a kill leaves the old file or none
        items.append({"tag": tag, "file": file, "width": image.width, "height": image.height})
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / INDEX_FILE, json.dumps({"record": source, "card_only": card_only, "images": items}, indent=1))
    return images


def read_index(job_dir: Path) -> dict[str, Any] | None:
    """`<job_dir>/heatmaps/index.json`, or None when the job drew no heatmaps (or it is unreadable)."""
    try:
        index: dict[str, Any] = json.loads((Path(job_dir) / FOLDER / INDEX_FILE).read_text())
        return index
    except (OSError, ValueError):
        return None


def _source(record: Record) -> dict[str, object] | None:
    """Which record.json the images are of: its path, size and modification time."""
    if record.path is None or not Path(record.path).exists():
        return None
    stat = Path(record.path).stat()
    return {"path": str(Path(record.path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


__all__ = ["EncodedHeatmap", "HEATMAP_STAGES", "Scale", "drawn_stages", "heatmap_images", "job_heatmaps",
           "log_scale", "read_index", "stage_scale"]
