"""The pictures of the HTML pages: the PNGs each job wrote beside its record.json
(attnlab.reporting.job_heatmaps), inlined at their native size, never scaled by the browser.

A record whose job wrote no PNGs (log.images=false, or a record from before they were kept)
is drawn from the values it holds, when it holds them; otherwise the card says why there is no
picture and how to get one.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from attnlab.record import Record
from attnlab.reporting.job_heatmaps import FOLDER, EncodedHeatmap, read_index


def img_html(image: EncodedHeatmap, alt: str) -> str:
    """An <img> of PNG bytes at their own size (width and height given: the page never rescales)."""
    data = base64.b64encode(image.png).decode("ascii")
    return (f'<img alt="{html.escape(alt)}" width="{image.width}" height="{image.height}" '
            f'src="data:image/png;base64,{data}">')


def job_images(record: Record) -> dict[str, EncodedHeatmap]:
    """{tag: PNG} the record's job wrote (empty when it wrote none, or they are of another record)."""
    if record.path is None:
        return {}
    source = str(Path(record.path).resolve())
    # the job folder: the record's own, or for a seed of an n_seeds job (seed-<s>/) the one above it
    candidates = [(folder, read_index(folder)) for folder in Path(record.path).parents[:2]]
    found = [(folder, index) for folder, index in candidates if index and (index.get("record") or {}).get("path") == source]
    if not found:
        return {}
    job_dir, index = found[0]
    images = {}
    for item in index["images"]:
        try:
            png = (job_dir / FOLDER / item["file"]).read_bytes()
        except OSError:
            continue
        images[item["tag"]] = EncodedHeatmap(png, item["height"], item["width"])
    return images


def drawn_images(record: Record) -> dict[str, EncodedHeatmap]:
    """The record's heatmaps drawn from the values it holds (a record whose job kept no PNGs)."""
    from attnlab.reporting.job_heatmaps import heatmap_images  # Pillow: only when there are no files

    try:
        return dict(heatmap_images(record))
    except ValueError:  # e.g. a 0-d "weights" from a broken variant
        return {}


def record_images(record: Record) -> dict[str, EncodedHeatmap]:
    return job_images(record) or drawn_images(record)


def missing_note(record: Record, stage: str = "weights") -> str:
    """Why a card has no picture of `stage`, in one sentence with what to do."""
    if stage not in record.variant.shapes:
        return f'<p class="note">no {stage} captured</p>'
    shape = "x".join(map(str, record.variant.shapes[stage]))
    return (f'<p class="note">no picture of the {stage} ({shape}): the job kept no heatmaps '
            f'(log.images=false) and values this large are not inlined in record.json; run it with log.images=true</p>')


CARD_TAGS = ("heatmaps/variant/weights", "heatmaps/variant/weights_log", "heatmaps/difference/weights")
SOURCES = ("variant", "reference", "difference")


def card_pictures(record: Record) -> str:
    """A configuration's card: the variant's weights (a grid of all heads), their log view and,
    where they differ, their difference from the reference's."""
    images = record_images(record)
    shown = [tag for tag in CARD_TAGS if tag in images]
    if not shown:
        return missing_note(record)
    return "".join(img_html(images[tag], f"{tag.split('/')[1]} attention weights of {record.variant.name}"
                            + (" (log scale)" if tag.endswith("_log") else "")) for tag in shown)


def stage_of(tag: str) -> str:
    """The stage a tag draws (`heatmaps/variant/weights_log/...` draws the weights)."""
    return tag.split("/")[2].removesuffix("_log")


def stage_pictures(images: dict[str, EncodedHeatmap], stage: str, *, per_head: bool = True) -> str:
    """One stage: its grids (or maps) side by side, variant, reference and difference, then their
    log views, then the full-resolution crops; each head's three maps side by side, folded away."""
    def row(tags: list[str]) -> str:
        return '<div class="cards">' + "".join(img_html(images[t], t) for t in tags if t in images) + "</div>"

    grids = [f"heatmaps/{source}/{stage}" for source in SOURCES]
    logs = [f"heatmaps/{source}/{stage}_log" for source in SOURCES if f"heatmaps/{source}/{stage}_log" in images]
    crops = [tag for tag in images if stage_of(tag) == stage and tag.rsplit("/", 1)[-1].startswith("crop")]
    heads = sorted({int(tag.rsplit("/head", 1)[1]) for tag in images
                    if stage_of(tag) == stage and tag.count("/") == 3 and "/head" in tag})
    folded = ""
    if heads and per_head:
        by_head = "".join(f"<h4>head {h}</h4>" + row([f"heatmaps/{source}/{stage}/head{h}" for source in SOURCES])
                          for h in heads)
        folded = (f"<details><summary>each head: variant, reference, difference side by side ({len(heads)} heads)"
                  f"</summary>{by_head}</details>")
    return f"<h3>{html.escape(stage)}</h3>{row(grids)}{row(logs) if logs else ''}{row(crops) if crops else ''}{folded}"


def record_pictures(record: Record) -> str:
    """A single run's page: every stage's pictures (stage_pictures), the first divergent stage
    first (what the findings are about), then the others in the order they were drawn."""
    images = record_images(record)
    if not images:
        return missing_note(record)
    stages = dict.fromkeys(map(stage_of, images))
    first = [record.first_divergent_stage] if record.first_divergent_stage in stages else []
    return "".join(stage_pictures(images, stage) for stage in dict.fromkeys([*first, *stages]))


__all__ = ["card_pictures", "img_html", "job_images", "record_images", "record_pictures", "stage_pictures"]
