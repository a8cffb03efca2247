"""attnlab's hand-written parts against the libraries that do the same job, in one process, as ratios.

    python benchmarks/handwritten.py               a table on stdout
    python benchmarks/handwritten.py --json        one JSON list (what benchmarks/run.py reads)
    python benchmarks/handwritten.py --repeats 3   fewer interleaved repeats

Each comparison times attnlab's part and the library's equivalent alternately (attnlab, library,
attnlab, ...) and reports the median per call; ratio = attnlab / library, so below 1 attnlab is
faster. Sizes: the book's 6 tokens and 4096 tokens (a map pooled to 192 cells a side: every map
image is now one size, so the two differ in content, not in pixels).

- heatmap: render and PNG-encode an annotated map, attnlab's renderer vs matplotlib (a fresh
  Agg Figure, imshow, colour bar, labels, savefig to BytesIO), on the same block-max-pooled data;
- png: encode the same rendered image, attnlab's `to_png_bytes` vs Pillow's `Image.save(format="PNG",
  compress_level=1)` (the zlib level attnlab uses; keep the encoder only at >= 2x at every size);
- progress: N updates to a non-tty stream, attnlab's Progress vs tqdm (default, and
  `disable=None`, its own "off when not a terminal") and rich;
- hparams: the experiment/session summaries, built by hand vs torch's `summary.hparams` and
  tensorboard's `summary_v2` (`hparams_config_pb` + `hparams_pb`), with whether each keeps bools.
- import: the one-off import cost of each side, in a fresh interpreter.

matplotlib, tqdm and rich are not attnlab dependencies: a comparison whose library is missing is
reported as skipped, with the pip command that adds it.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

BOOK_TOKENS = ["Your", "journey", "starts", "with", "one", "step"]
LARGE = 4096
PROGRESS_UPDATES = (100, 10_000)
PROGRESS_PY = Path(__file__).resolve().parents[1] / "src" / "attnlab" / "app" / "progress.py"


@dataclass
class Comparison:
    part: str
    size: str
    library: str
    ours_ms: float | None = None
    library_ms: float | None = None
    detail: str = ""
    skipped: str = ""  # why there is no figure

    @property
    def ratio(self) -> float | None:
        if self.ours_ms is None or not self.library_ms:
            return None
        return self.ours_ms / self.library_ms

    def line(self) -> str:
        head = f"{self.part} ({self.size}) attnlab / {self.library}"
        if self.skipped:
            return f"{head}: skipped: {self.skipped}"
        return f"{head}: {self.ratio:.3g}x ({self.ours_ms:.3g} ms vs {self.library_ms:.3g} ms); {self.detail}"


def installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def missing(module: str) -> str:
    return (f"{module} is not installed (pip install -c constraints.txt -e '.[bench]'; a benchmark-only library, "
            f"not an attnlab dependency)")


def per_call(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def paired(ours: Callable[[], Any], theirs: Callable[[], Any], repeats: int, calls: int = 1) -> tuple[float, float]:
    """Median ms per call of each, measured alternately after one warm-up call each."""
    ours(), theirs()
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        order = ((0, ours), (1, theirs)) if i % 2 == 0 else ((1, theirs), (0, ours))
        for slot, fn in order:
            times[slot].append(per_call(fn, calls) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


# ---------------------------------------------------------------- data


def softmax_rows(n: int, seed: int = 123) -> np.ndarray:
    scores = np.random.default_rng(seed).standard_normal((n, n), dtype=np.float32)
    scores -= scores.max(axis=1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=1, keepdims=True)


def block_max(matrix: np.ndarray, side: int) -> np.ndarray:
    """Pooled to `side` cells per axis by block max, as attnlab pools a sequential map."""
    n = matrix.shape[0]
    if n <= side:
        return matrix
    block = -(-n // side)  # ceil: the last block may be short, as torch's ceil_mode pooling
    cells = -(-n // block)
    padded = np.full((cells * block, cells * block), -np.inf, dtype=matrix.dtype)
    padded[:n, :n] = matrix
    return padded.reshape(cells, block, cells, block).max(axis=(1, 3))


@dataclass
class Map:
    size: str
    matrix: np.ndarray
    labels: list[str] | None


def maps() -> list[Map]:
    return [Map("6 tokens", softmax_rows(6), BOOK_TOKENS), Map(f"{LARGE} tokens", softmax_rows(LARGE), None)]


# ---------------------------------------------------------------- heatmap, PNG


def attnlab_png(m: Map) -> bytes:
    from attnlab.drawing.png import to_png_bytes
    from attnlab.reporting.heatmap import render_heatmap

    return to_png_bytes(render_heatmap(m.matrix, title="weights", row_labels=m.labels, col_labels=m.labels))


def matplotlib_png(m: Map, pixels: tuple[int, int]) -> bytes:
    """The same picture with matplotlib: pooled cells, colour bar, title, token labels and (up to
    16 tokens) every cell's value, at attnlab's pixel size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlab.reporting.heatmap import ANNOTATE_MAX, MAX_SIDE

    cells = block_max(m.matrix, MAX_SIDE)
    height, width = pixels
    figure = Figure(figsize=(width / 100, height / 100), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    shown = axes.imshow(cells, cmap="viridis", interpolation="nearest", aspect="auto")
    figure.colorbar(shown, ax=axes)
    axes.set_title("weights", fontsize=9)
    if m.labels is not None:
        axes.set_xticks(range(len(m.labels)), m.labels, rotation=90, fontsize=7)
        axes.set_yticks(range(len(m.labels)), m.labels, fontsize=7)
    if max(cells.shape) <= ANNOTATE_MAX:
        for (i, j), value in np.ndenumerate(cells):
            axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                      color="black" if value > cells.mean() else "white")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def compare_heatmap(repeats: int) -> list[Comparison]:
    out = []
    for m in maps():
        if not installed("matplotlib"):
            out.append(Comparison("heatmap render+encode", m.size, "matplotlib", skipped=missing("matplotlib")))
            continue
        from attnlab.reporting.heatmap import render_heatmap

        pixels = render_heatmap(m.matrix, title="weights", row_labels=m.labels, col_labels=m.labels).shape[:2]
        ours, theirs = paired(lambda: attnlab_png(m), lambda: matplotlib_png(m, pixels), repeats)
        out.append(Comparison("heatmap render+encode", m.size, "matplotlib", ours, theirs,
                              f"{pixels[1]}x{pixels[0]} px; PNG {len(attnlab_png(m)) / 1024:.1f} KiB vs "
                              f"{len(matplotlib_png(m, pixels)) / 1024:.1f} KiB; pooling included on both sides"))
    return out


def compare_png(repeats: int) -> list[Comparison]:
    """attnlab's encoder (rows unfiltered, zlib level 1) against Pillow tuned the way its users
    would tune it for speed: `compress_level=1`, the same zlib level (Pillow has no option to turn
    its adaptive row filter off for RGB); Pillow's default level 6 in the detail. The images are
    what a job draws now: a single map and a grid of 12 heads, each of one fixed size."""
    from PIL import Image

    from attnlab.drawing.png import to_png_bytes
    from attnlab.reporting.heatmap import render_head_grid, render_heatmap

    rng = np.random.default_rng(0)
    heads = rng.random((12, 1024, 1024), dtype=np.float32)  # the multi-head scale figures' size
    images = {m.size: render_heatmap(m.matrix, title="weights", row_labels=m.labels, col_labels=m.labels) for m in maps()}
    images["12 heads x 1024 tokens, grid"] = render_head_grid(heads, title="weights")
    out = []
    for size, image in images.items():

        def pillow(level: int = 1, image: np.ndarray = image) -> bytes:
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="PNG", compress_level=level)
            return buffer.getvalue()

        calls = 20 if image.size < 1_000_000 else 3
        ours, theirs = paired(lambda image=image: to_png_bytes(image), pillow, repeats, calls)
        out.append(Comparison("PNG encode", size, "Pillow", ours, theirs,
                              f"Pillow at compress_level=1, attnlab's zlib level; {image.shape[1]}x{image.shape[0]} px; "
                              f"{len(to_png_bytes(image)) / 1024:.1f} KiB vs {len(pillow()) / 1024:.1f} KiB "
                              f"(Pillow's default level 6: {len(pillow(6)) / 1024:.1f} KiB)"))
    return out


def compare_progress(repeats: int) -> list[Comparison]:
    from attnlab.app.progress import Progress

    def ours(n: int) -> None:
        with Progress(n, stream=io.StringIO()) as bar:
            for _ in range(n):
                bar.phase("forward")
                bar.advance()

    libraries: dict[str, tuple[str, Callable[[int], None]]] = {}
    if installed("tqdm"):
        from tqdm import tqdm

        def tqdm_default(n: int) -> None:
            with tqdm(total=n, file=io.StringIO()) as bar:
                for _ in range(n):
                    bar.set_postfix_str("forward", refresh=False)
                    bar.update()

        def tqdm_off(n: int) -> None:
            with tqdm(total=n, file=io.StringIO(), disable=None) as bar:  # None: off when not a terminal
                for _ in range(n):
                    bar.set_postfix_str("forward", refresh=False)
                    bar.update()

        libraries["tqdm"] = ("tqdm", tqdm_default)
        libraries["tqdm disable=None"] = ("tqdm", tqdm_off)
    if installed("rich"):
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        def rich(n: int) -> None:
            with RichProgress(console=Console(file=io.StringIO())) as bar:
                task = bar.add_task("seeds", total=n)
                for _ in range(n):
                    bar.update(task, advance=1, description="forward")

        libraries["rich"] = ("rich", rich)
    out = []
    for n in PROGRESS_UPDATES:
        for name in ("tqdm", "tqdm disable=None", "rich"):
            if name not in libraries:
                module = name.split()[0]
                out.append(Comparison("progress", f"{n} updates", name, skipped=missing(module)))
                continue
            ours_ms, theirs_ms = paired(lambda: ours(n), lambda: libraries[name][1](n), repeats,
                                        calls=max(1, 2000 // n))
            out.append(Comparison("progress", f"{n} updates", name, ours_ms, theirs_ms,
                                  f"{ours_ms / n * 1000:.3g} us vs {theirs_ms / n * 1000:.3g} us per update (attnlab "
                                  "draws nothing off a terminal)"))
    return out


# ---------------------------------------------------------------- hparams


def config_hparams(overrides: list[str]) -> dict[str, bool | int | float | str]:
    from omegaconf import OmegaConf

    from attnlab.app.api import compose_config
    from attnlab.reporting.metrics import flat_hparams

    return flat_hparams(OmegaConf.to_container(compose_config("reference", 123, overrides), resolve=True))


def bools_kept(summary: Any) -> bool:
    """Whether a session-start summary records the config's bools as bools."""
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    for value in summary.value:
        if value.tag == metadata.SESSION_START_INFO_TAG:
            data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
            kinds = {name: v.WhichOneof("kind") for name, v in data.session_start_info.hparams.items()}
            return all(kinds[name] == "bool_value" for name in kinds if name in BOOL_KEYS)
    return False


BOOL_KEYS: set[str] = set()


def compare_hparams(repeats: int) -> list[Comparison]:
    from tensorboard.plugins.hparams import summary_v2
    from torch.utils.tensorboard.summary import hparams as torch_hparams

    from attnlab.reporting.metrics import KEY_METRICS as HPARAM_METRICS
    from attnlab.sinks.tensorboard_format import hparams_summaries

    metrics = list(HPARAM_METRICS)
    out = []
    for size, overrides in (("6 tokens", []), (f"{LARGE} tokens", ["inputs=random", f"inputs.n_tokens={LARGE}"])):
        hparams = config_hparams(overrides)
        BOOL_KEYS.clear()
        BOOL_KEYS.update(name for name, value in hparams.items() if isinstance(value, bool))
        ours_ok = bools_kept(hparams_summaries(hparams, metrics, ok=True)[1])

        def v2() -> list[Any]:
            return [summary_v2.hparams_config_pb([summary_v2.HParam(name) for name in hparams],
                                                 [summary_v2.Metric(tag) for tag in metrics]),
                    summary_v2.hparams_pb(hparams)]

        arms = {
            "torch summary.hparams": (lambda: torch_hparams(hparams, {tag: 0.0 for tag in metrics}), 1),
            "tensorboard summary_v2": (v2, 1),
        }
        for name, (library, start_index) in arms.items():
            ours, theirs = paired(lambda: hparams_summaries(hparams, metrics, ok=True), library, repeats, calls=200)
            kept = bools_kept(library()[start_index])
            out.append(Comparison("hparams protos", size, name, ours, theirs,
                                  f"{len(hparams)} hparams ({len(BOOL_KEYS)} bool); bools kept as bools: attnlab "
                                  f"{'yes' if ours_ok else 'NO'}, {name} {'yes' if kept else 'NO'}"
                                  + ("; summary_v2 has no session-end summary (built by hand either way)"
                                     if "v2" in name else "")))
    return out


# ---------------------------------------------------------------- imports


IMPORTS = {
    "heatmap": ("import numpy, PIL.Image, PIL.ImageDraw, PIL.ImageFont",
                "import numpy, matplotlib; matplotlib.use('Agg'); import matplotlib.figure, "
                "matplotlib.backends.backend_agg", "matplotlib"),
    "progress": (f"import importlib.util as u; s = u.spec_from_file_location('p', {str(PROGRESS_PY)!r}); "
                 "s.loader.exec_module(u.module_from_spec(s))", "import tqdm", "tqdm"),
    "progress (rich)": (f"import importlib.util as u; s = u.spec_from_file_location('p', {str(PROGRESS_PY)!r}); "
                        "s.loader.exec_module(u.module_from_spec(s))", "import rich.progress", "rich"),
}


def import_ms(statement: str) -> float:
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(proc.stdout.strip()) * 1000


def compare_imports(repeats: int) -> list[Comparison]:
    out = []
    for part, (ours, theirs, module) in IMPORTS.items():
        if not installed(module):
            out.append(Comparison(f"import, {part}", "once a process", module, skipped=missing(module)))
            continue
        o, t = paired(lambda: import_ms(ours), lambda: import_ms(theirs), max(1, min(repeats, 3)))
        out.append(Comparison(f"import, {part}", "once a process", module, o, t, "fresh interpreter, numpy included "
                              "on both sides" if part == "heatmap" else "fresh interpreter"))
    return out


COMPARISONS: dict[str, Callable[[int], list[Comparison]]] = {
    "heatmap": compare_heatmap, "png": compare_png, "progress": compare_progress,
    "hparams": compare_hparams, "import": compare_imports,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats per comparison (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of a table")
    args = parser.parse_args(argv)
    results: list[Comparison] = []
    for run in COMPARISONS.values():
        for comparison in run(args.repeats):
            results.append(comparison)
            if not args.json:
                print(comparison.line(), flush=True)
    if args.json:
        print(json.dumps([{**asdict(c), "ratio": c.ratio} for c in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
