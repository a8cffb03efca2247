"""What a run inside a model costs, as ratios to Hugging Face's own forward with
`output_attentions=True` (eager attention) measured in the same run.

    python benchmarks/model_cost.py                         # GPT-2 small's shape, 128 and 1,024 tokens
    python benchmarks/model_cost.py --n-tokens 256 --n-layer 4   # a smaller check

A GPT-2-shaped model with random weights is saved once (save_pretrained, safetensors) to a
temporary folder; every figure loads it from there, so loading counts on both sides.
- every layer: `intervene=observe layer=all` (every layer's stages captured in one forward, each
  diagnosed, its heads' patterns; sinks off). Target: at most 2x.
- one layer swapped: `attnlab.run("mha_scaled_by_d_out", model.path=..., layer=5)` (the unmodified
  forward capturing the layer, the model run again with the variant, its effect and diagnosis). Target: at most 2.5x.
- one head ablated: `intervene=ablate_head intervene.head=0 layer=5`, the same costs. Target: at most 2.5x.
- peak memory: the one-layer run's peak resident memory against the forward with
  `output_attentions=True`, each in a fresh process (its VmHWM). Target: at most 2x.
Times are medians of --repeats rounds after one warm-up; each round times the forward, then each
run, so that a busy moment of the shared machine falls on both sides of a ratio alike. Each ratio
is given twice: of wall-clock seconds, and of the process's CPU seconds (`time.process_time`, torch
on one thread), which a machine shared with other work moves far less.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"  # the lesson texts, beside the clone


def text_of(n_tokens: int) -> str:
    """Words (letters only: no Hydra quoting) of the lesson texts, exactly n_tokens GPT-2 tokens."""
    from attnlab.inputs.text import gpt2_encoding

    source = " ".join(p.read_text() for p in sorted(SEEDS.glob("*.txt"))) if SEEDS.is_dir() else "attention is all"
    words = re.sub(r"[^A-Za-z ]+", " ", source).split() * 50
    encoding = gpt2_encoding()
    ids = encoding.encode(" ".join(words))[:n_tokens]
    text = encoding.decode(ids)
    while len(encoding.encode(text)) > n_tokens:  # a re-encoded boundary may merge differently
        text = text.rsplit(" ", 1)[0]
    return text


def save_model(folder: Path, n_layer: int) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=n_layer)).save_pretrained(folder)
    return folder


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of `run()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def hf_forward(folder: Path, text: str) -> tuple[float, float]:
    """(wall, CPU) seconds to load the model and run its forward returning every layer's attention weights."""
    import torch
    from transformers import GPT2LMHeadModel

    from attnlab.inputs.text import gpt2_encoding

    def forward() -> None:
        model = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
        ids = torch.tensor([gpt2_encoding().encode(text)])  # (1, T)
        with torch.no_grad():
            model(ids, output_attentions=True, use_cache=False)

    return timed(forward)


def attnlab_run(folder: Path, text: str, *words: str) -> tuple[float, float]:
    import attnlab

    return timed(lambda: attnlab.run("mha_scaled_by_d_out", overrides=[
        f"model.path={folder}", "inputs=text", f"inputs.text='{text}'", *words, "log.tensorboard=false",
        "log.table=false", "log.html=false"]))


def medians(runs: dict[str, Callable[[], tuple[float, float]]], repeats: int) -> dict[str, tuple[float, float]]:
    """Each run's median (wall, CPU) seconds over `repeats` rounds, after one warm-up round."""
    for run in runs.values():
        run()  # imports, Hydra's first compose, first-touch of the weights
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(run())
    return {name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
            for name, values in times.items()}


def peak_rss(code: str) -> int:
    """Peak resident bytes of a fresh interpreter running `code`, as it reports itself: its VmHWM
    where /proc has it. Not ru_maxrss: Linux keeps the forking parent's size across exec in it,
    and this process holds several GB by then, which both sides would report alike."""
    report = ("; import pathlib, resource; status = pathlib.Path('/proc/self/status'); "
              "print(int(status.read_text().split('VmHWM:')[1].split()[0]) if status.exists() "
              "else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code + report], check=True, capture_output=True, text=True)
    return int(done.stdout.split()[-1]) * 1024  # VmHWM and Linux's ru_maxrss are in KiB


def verdict(name: str, ratio: float, target: float, detail: str) -> bool:
    ok = ratio <= target
    print(f"{name}: {ratio:.2f}x (target <= {target}x) {'PASS' if ok else 'FAIL'} — {detail}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-tokens", default="128,1024", help="token counts, comma-separated")
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory figure")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # CPU seconds of one thread: the machine is shared
    layer = "5" if args.n_layer > 5 else "0"
    results = []
    with tempfile.TemporaryDirectory(prefix="attnlab-model-cost-") as tmp:
        folder = save_model(Path(tmp) / "gpt2", args.n_layer)
        for n_tokens in (int(n) for n in args.n_tokens.split(",")):
            text = text_of(n_tokens)
            took = medians({
                "forward": lambda: hf_forward(folder, text),
                "all": lambda: attnlab_run(folder, text, "layer=all", "intervene=observe"),
                "swap": lambda: attnlab_run(folder, text, f"layer={layer}"),
                "ablate": lambda: attnlab_run(folder, text, f"layer={layer}", "intervene=ablate_head",
                                              "intervene.head=0"),
            }, args.repeats)
            (forward, forward_cpu) = took["forward"]
            print(f"GPT-2 shape, {args.n_layer} layers, {n_tokens} tokens; HF forward with output_attentions "
                  f"(load included) {forward:.2f} s wall, {forward_cpu:.2f} s CPU")
            for name, title, target in (("all", "layer=all captured", 2.0),
                                        ("swap", "one layer swapped, effect and diagnosis", 2.5),
                                        ("ablate", "one head ablated, effect and diagnosis", 2.5)):
                wall, cpu = took[name]
                results.append(verdict(f"{n_tokens} tokens: {title} / HF forward", wall / forward, target,
                                       f"{wall:.2f} s wall; CPU {cpu / forward_cpu:.2f}x ({cpu:.2f} s)"))
            if args.no_memory:
                continue
            here = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import model_cost as m; "
            own_peak = peak_rss(here + f"m.hf_forward({str(folder)!r}, {text!r})")
            run_peak = peak_rss(here + f"m.attnlab_run({str(folder)!r}, {text!r}, 'layer={layer}')")
            results.append(verdict(f"{n_tokens} tokens: peak memory / HF forward", run_peak / own_peak, 2.0,
                                   f"{run_peak / 2**20:.0f} MiB against {own_peak / 2**20:.0f} MiB"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
