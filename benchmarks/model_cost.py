"""What a run inside a model costs, as ratios to the model's own forwards measured in the same run.

    python benchmarks/model_cost.py                    # GPT-2's shape (12 layers, 12 heads, 768 wide), 1,024 tokens
    python benchmarks/model_cost.py --n-tokens 256 --n-layer 4   # a smaller check

A GPT-2-shaped model with random weights is saved once (save_pretrained, safetensors) to a
temporary folder; every figure loads it from there, so loading counts on both sides.
- one layer: `attnlab.run("mha_scaled_by_d_out", model.path=..., layer=5)` (capture of the layer's
  stages, the diagnosis, the model run again, the effect; sinks off) against two plain forwards of the
  model (`model(ids).logits`, no_grad). Target: at most 2.5x.
- every layer: the same with `layer=all` against (n_layer + 1) plain forwards. Target: at most 1.5x.
- peak memory: the one-layer run's peak resident memory against a plain forward with
  `output_attentions=True`, each in a fresh process (its VmHWM). Target: at most 2x.
Times are the median of --repeats runs, each in the same process after one warm-up.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
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


def plain_forward(folder: Path, text: str, attentions: bool = False) -> float:
    import torch
    from transformers import GPT2LMHeadModel

    from attnlab.inputs.text import gpt2_encoding

    start = time.perf_counter()
    model = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([gpt2_encoding().encode(text)])
    with torch.no_grad():
        model(ids, output_attentions=attentions, use_cache=False)
    return time.perf_counter() - start


def attnlab_run(folder: Path, text: str, layer: str) -> float:
    import attnlab

    start = time.perf_counter()
    attnlab.run("mha_scaled_by_d_out", overrides=[f"model.path={folder}", "inputs=text", f"inputs.text='{text}'",
                                                  f"layer={layer}", "log.tensorboard=false", "log.table=false",
                                                  "log.html=false"])
    return time.perf_counter() - start


def median_time(fn, repeats: int) -> float:
    fn()  # imports, Hydra's first compose, first-touch of the weights
    return statistics.median(fn() for _ in range(repeats))


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
    parser.add_argument("--n-tokens", type=int, default=1024)
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    text = text_of(args.n_tokens)
    with tempfile.TemporaryDirectory(prefix="attnlab-model-cost-") as tmp:
        folder = save_model(Path(tmp) / "gpt2", args.n_layer)
        forward = median_time(lambda: plain_forward(folder, text), args.repeats)
        one = median_time(lambda: attnlab_run(folder, text, "5" if args.n_layer > 5 else "0"), args.repeats)
        every = median_time(lambda: attnlab_run(folder, text, "all"), args.repeats)
        here = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import model_cost as m; "
        own_peak = peak_rss(here + f"m.plain_forward({str(folder)!r}, {text!r}, attentions=True)")
        run_peak = peak_rss(here + f"m.attnlab_run({str(folder)!r}, {text!r}, '0')")
    print(f"GPT-2 shape, {args.n_layer} layers, {args.n_tokens} tokens; a plain forward {forward:.2f} s")
    results = [
        verdict("one layer replaced / two forwards", one / (2 * forward), 2.5, f"{one:.2f} s"),
        verdict("layer=all / (n_layer + 1) forwards", every / ((args.n_layer + 1) * forward), 1.5, f"{every:.2f} s"),
        verdict("peak memory / forward with output_attentions", run_peak / own_peak, 2.0,
                f"{run_peak / 2**20:.0f} MiB against {own_peak / 2**20:.0f} MiB"),
    ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
