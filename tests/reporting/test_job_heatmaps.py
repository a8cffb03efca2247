"""What a job draws (attnlab.reporting.job_heatmaps): a grid of all heads and an image per head,
one size per kind, one colour scale for the variant and the reference, titles naming the head and
the batch item, the stages that are read, and the PNGs kept beside record.json."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import attnlab
from attnlab.drawing import glyphs
from attnlab.reporting import heatmap, job_heatmaps
from attnlab.reporting.job_heatmaps import EncodedHeatmap, _EncodedCache, heatmap_images, read_index

NO_SINKS = {"log": {"tensorboard": False, "table": False, "html": False}}


def size(image: EncodedHeatmap) -> tuple[int, int]:
    decoded = Image.open(io.BytesIO(image.png))
    assert decoded.size == (image.width, image.height)
    return decoded.size


@pytest.fixture(scope="module")
def gqa_record():
    """A real 4-head run (2 kv heads) of 16 random tokens: its heads differ from the reference's."""
    return attnlab.run("gqa", 1, num_heads=4, num_kv_heads=2, d_out=16, inputs="random",
                       overrides=["inputs.n_tokens=16"], **NO_SINKS).record


def test_a_grid_of_all_heads_and_an_image_per_head_each_of_one_size(gqa_record) -> None:
    images = dict(heatmap_images(gqa_record))
    assert {"heatmaps/variant/weights", "heatmaps/reference/weights", "heatmaps/difference/weights"} <= set(images)
    per_head = [tag for tag in images if "/head" in tag]
    assert {f"heatmaps/variant/weights/head{h}" for h in range(4)} <= set(per_head)
    assert len({size(images[tag]) for tag in per_head}) == 1  # one size per kind: every head's map
    grids = [tag for tag in images if tag.count("/") == 2 and tag.split("/")[2] in ("weights", "weights_log", "context")]
    assert len({size(images[tag]) for tag in grids}) == 1  # and every grid of 4 heads
    assert all(size(images[tag])[0] < 700 for tag in images)  # no 3,900 px strip


def captured(monkeypatch) -> list[tuple[str, str]]:
    """(title, tick text) per image: the ticks the colour bar of each title is drawn with."""
    drawn: list[str] = []
    original = glyphs.draw_string

    def record(image, xy, text, **kwargs):
        drawn.append(text)
        return original(image, xy, text, **kwargs)

    monkeypatch.setattr(glyphs, "draw_string", record)
    monkeypatch.setattr(job_heatmaps, "_ENCODED", _EncodedCache(budget=0))  # draw every image
    monkeypatch.setattr(job_heatmaps, "in_threads", lambda fn, items: [fn(item) for item in items])  # in order
    return drawn


def ticks_after(drawn: list[str], title: str, n: int = 2) -> list[str]:
    """The colour bar's ticks of the image titled `title`: the strings drawn last, before the next title
    (top, bottom, and 0 in the middle of a diverging bar)."""
    start = drawn.index(title)
    rest = drawn[start + 1:]
    following = [i for i, text in enumerate(rest) if " · " in text]
    strings = rest[: following[0] if following else len(rest)]
    return strings[-n:]


def test_variant_and_reference_share_one_scale_and_the_difference_is_symmetric(gqa_record, monkeypatch) -> None:
    drawn = captured(monkeypatch)
    heatmap_images(gqa_record)
    variant = gqa_record.variant.stages["context"][0]  # (heads, T, head_dim) of batch item 0
    reference = gqa_record.reference.stages["context"][0]
    assert variant.min() != reference.min() and variant.max() != reference.max()  # own ranges would differ
    both = np.concatenate([variant.ravel(), reference.ravel()])
    expected = [f"{float(both.max()):.3g}", f"{float(both.min()) + 0.0:.3g}"]
    assert ticks_after(drawn, "context · variant · head 1 · batch item 0") == expected
    assert ticks_after(drawn, "context · reference · head 1 · batch item 0") == expected
    assert ticks_after(drawn, "context · reference · all heads · batch item 0") == expected
    variant, reference = gqa_record.variant.stages["weights"][0], gqa_record.reference.stages["weights"][0]
    extent = float(np.abs(variant - reference).max())
    assert ticks_after(drawn, "weights · difference · head 1 · batch item 0", n=3) == [f"{extent:.3g}", f"{-extent:.3g}", "0"]


def test_only_stages_that_differ_are_drawn_beyond_weights_context_and_output() -> None:
    record = attnlab.run("reference", 1, **NO_SINKS).record  # the reference against itself
    tags = {tag for tag, _ in heatmap_images(record)}
    assert record.output_is_context
    assert tags == {f"heatmaps/{source}/{stage}" for source in ("variant", "reference")
                    for stage in ("weights", "context")} | {"heatmaps/variant/weights_log"}
    # no all-zero difference, no unread scores, no log view of a reference equal to the variant,
    # and its output, the context itself, drawn once as the context


def test_a_pooled_stage_has_a_full_resolution_crop_of_the_shown_head() -> None:
    record = attnlab.run("unscaled", 1, inputs="random", d_out=4, overrides=["inputs.n_tokens=300", "inputs.d_in=4"],
                         **NO_SINKS).record
    images = dict(heatmap_images(record))
    assert "heatmaps/variant/weights/crop64" in images
    assert size(images["heatmaps/variant/weights/crop64"]) == size(images["heatmaps/variant/weights"])


def test_a_job_keeps_its_pngs_and_a_second_sink_reads_them_back(tmp_path: Path, monkeypatch) -> None:
    result = attnlab.run("unscaled", 1, out_dir=tmp_path, **NO_SINKS)
    first = job_heatmaps.job_heatmaps(result.record, tmp_path)
    index = read_index(tmp_path)
    assert [item["tag"] for item in index["images"]] == [tag for tag, _ in first]
    for item in index["images"]:
        assert Image.open(tmp_path / "heatmaps" / item["file"]).size == (item["width"], item["height"])

    def no_drawing(record):
        raise AssertionError("drawn again")

    monkeypatch.setattr(job_heatmaps, "heatmap_images", no_drawing)
    again = job_heatmaps.job_heatmaps(result.record, tmp_path)
    assert [(tag, image.png) for tag, image in again] == [(tag, image.png) for tag, image in first]


def test_the_cache_drops_the_least_recently_used_past_its_byte_budget() -> None:
    cache = _EncodedCache(budget=250)
    entry = EncodedHeatmap(b"x" * 100, 1, 1)
    for key in (b"a", b"b"):
        cache.put(key, entry)
    assert cache.get(b"a") is entry  # now b is the least recently used
    cache.put(b"c", entry)
    assert cache.get(b"b") is None and cache.get(b"a") is entry and cache.get(b"c") is entry
    assert cache.size == 200


def test_a_changed_value_or_title_is_a_new_image() -> None:
    weights = np.random.default_rng(12).random((6, 6)).astype(np.float32)

    def draw(values: np.ndarray, title: str) -> bytes:
        return job_heatmaps.encoded(lambda: heatmap.render_heatmap(values, title=title), values, title).png

    first = draw(weights, "weights · variant")
    changed = weights.copy()
    changed[5, 5] += 0.5
    assert draw(changed, "weights · variant") != first
    assert draw(weights, "weights · reference") != first
    assert draw(weights.copy(), "weights · variant") == first


def test_encoding_beside_the_drawing_gives_the_drawn_pixels_and_leaves_no_thread(gqa_record) -> None:
    """Each PNG (encoded on a thread of the call's own while the next map is drawn) decodes to
    the map drawn for its tag, in the order drawn; no thread is left once the call returns."""
    import threading

    job_heatmaps._ENCODED.entries.clear()  # nothing remembered: every map drawn and encoded here
    job_heatmaps._ENCODED.size = 0
    before = threading.active_count()
    images = heatmap_images(gqa_record)
    assert threading.active_count() == before
    grid = heatmap.render_head_grid(gqa_record.variant.heads_view("weights", batch=0), title="weights · variant · all heads · batch item 0",
                                    value_range=(0.0, 1.0), legend="linear 0 to 1 (every weights map); grey: 0 (masked)",
                                    zero_grey=True, axes=("queries", "keys"))
    drawn = dict(images)["heatmaps/variant/weights"]
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(drawn.png)).convert("RGB")), grid)
    assert "keys" in {f.stage for f in gqa_record.findings}  # drawn first: a stage a finding names
    assert [tag for tag, _ in images][:2] == ["heatmaps/variant/keys", "heatmaps/variant/keys/head0"]


def test_the_stage_a_finding_names_is_drawn_variant_reference_and_difference() -> None:
    """`head_merge @ output`: the output was not drawn, only the weights and context that match."""
    record = attnlab.run("mha_head_merge", 1, **NO_SINKS).record
    assert "head_merge" in {f.code for f in record.findings if f.stage == "output"}
    tags = {tag for tag, _ in heatmap_images(record)}
    assert {f"heatmaps/{source}/output" for source in ("variant", "reference", "difference")} <= tags


def test_a_pooled_maps_crop_is_the_block_where_the_variant_first_differs() -> None:
    """The crop of a pooled map is the 64x64 block (on 64's grid) holding the shown head's first
    differing cell, row by row; the top-left block where nothing differs."""
    from attnlab.reporting.job_heatmaps import _crop_origin

    difference = np.zeros((2, 300, 300), np.float32)
    difference[1, 130, 70] = 0.5  # head 1 differs first at query 130, key 70
    assert _crop_origin(difference, head=1) == (128, 64)
    assert _crop_origin(difference, head=0) == (0, 0)  # nothing differs in head 0


def test_a_mask_on_one_side_only_is_named_in_the_difference_map_not_all_0(monkeypatch) -> None:
    """A causal mask that also hides the diagonal: scaled_scores differ only where the variant has
    -inf, so every finite difference is 0 and the bar used to read "all 0" over a grey diagonal."""
    drawn = captured(monkeypatch)
    record = attnlab.run("causal_mask_diagonal_0", 1, **NO_SINKS).record
    assert record.first_divergent_stage == "scaled_scores"
    heatmap_images(record, stages=["scaled_scores"])
    variant, reference = record.variant.stages["scaled_scores"][0], record.reference.stages["scaled_scores"][0]  # (T, T)
    only_variant = int(np.count_nonzero(np.isneginf(variant) & np.isfinite(reference)))
    assert only_variant == 6  # the book's six tokens: the diagonal
    start = drawn.index("scaled_scores · difference · batch item 0")
    legend = next(text for text in drawn[start:] if text.startswith("variant - reference"))
    assert legend.endswith(f"grey: {only_variant} -inf (masked in variant only)"), legend
    assert ticks_after(drawn, "scaled_scores · difference · batch item 0", n=1) == ["finite 0"]


def test_float_noise_below_the_first_divergent_stage_draws_no_difference_map() -> None:
    """A record the diagnosis calls equal (no first divergent stage) whose weights differ by rounding:
    its difference map painted 3e-8 as saturated cells on a "no findings" card."""
    from dataclasses import replace

    record = attnlab.run("linear", 1, **NO_SINKS).record
    noisy = dict(record.variant.stages, weights=record.variant.stages["weights"] + np.float32(3e-8))
    variant = replace(record.variant, stages=noisy, diagnostics={**record.variant.diagnostics, "divergence_weights": 3e-8})
    record = replace(record, variant=variant, first_divergent_stage=None, findings=[])
    tags = {tag for tag, _ in heatmap_images(record)}
    assert "heatmaps/variant/weights" in tags and not any(tag.startswith("heatmaps/difference/") for tag in tags)


@pytest.mark.parametrize("fill", [-np.inf, float(np.finfo(np.float32).min), -1e9, -1e4])
def test_masked_scores_are_grey_and_out_of_the_scale_whatever_the_fill(gqa_record, monkeypatch, fill) -> None:
    """Scaled scores masked causally by -inf, GPT-2's float32 minimum, -1e9 or -1e4 added to the
    scores: the masked cells are grey, the colour bar spans the unmasked scores only, and the same
    cells masked on both sides are no difference."""
    from dataclasses import replace

    drawn = captured(monkeypatch)
    own = gqa_record.reference.stages["scaled_scores"]  # (1, 4, 16, 16): no mask of its own
    later = np.triu(np.ones((16, 16), dtype=bool), 1)
    masked = (own + fill).astype(np.float32) if fill in (-1e9, -1e4) else np.full_like(own, fill)  # added, or put in
    reference = np.where(later, masked, own).astype(np.float32)
    variant = np.where(later, masked, own * 1.5).astype(np.float32)
    record = replace(
        gqa_record, first_divergent_stage="scaled_scores", findings=[],
        variant=replace(gqa_record.variant, stages={**gqa_record.variant.stages, "scaled_scores": variant},
                        diagnostics={**gqa_record.variant.diagnostics, "divergence_scaled_scores": 1.0}),
        reference=replace(gqa_record.reference, stages={**gqa_record.reference.stages, "scaled_scores": reference}))
    heatmap_images(record, stages=["scaled_scores"])
    title = "scaled_scores · variant · all heads · batch item 0"
    start = drawn.index(title)
    legend = next(text for text in drawn[start:] if text.startswith("linear p0.5"))
    assert legend == "linear p0.5 to p99.5 of variant and reference, unmasked; grey: masked"
    unmasked = np.concatenate([variant[0][:, ~later], reference[0][:, ~later]])
    low, high = sorted(float(tick.split()[-1]) for tick in ticks_after(drawn, title))
    assert unmasked.min() - 1e-2 <= low < high <= unmasked.max() + 1e-2
    difference = drawn.index("scaled_scores · difference · all heads · batch item 0")
    legend = next(text for text in drawn[difference:] if text.startswith("variant - reference"))
    assert legend == "variant - reference, symmetric about 0"  # nothing masked on one side only
