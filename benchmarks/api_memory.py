"""Peak memory of a run inside a model from Python against the same run from the command line,
each in a fresh process (its own VmHWM), as ratios measured in the same run.

    python benchmarks/api_memory.py                       # GPT-2 small's shape, 1,024 tokens, layer 5
    python benchmarks/api_memory.py --n-tokens 256 --n-layer 4

The model (GPT-2's shape, random weights) is saved once to a temporary folder (benchmarks/model_cost.py).
- CLI: `python -m attnlab model.path=DIR variant=mha_scaled_by_d_out layer=5` (sinks off but the
  record), and `layer=all intervene=observe` (every layer's record).
- API, the same folder: `attnlab.run("mha_scaled_by_d_out", model.path=DIR, layer=5)`, its Result kept.
- API, an in-memory model: the folder loaded with `from_pretrained` by the process itself, then
  `attnlab.run("mha_scaled_by_d_out", model=model, layer=5)` (the model is the user's: it counts on
  this side only, as a notebook holds it). Target: each API figure at most 1.2x the CLI's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from model_cost import peak_rss, save_model, text_of, verdict  # noqa: E402

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false", "log.terminal=false", "log.progress=false"]


def cli_peak(folder: Path, text: str, words: list[str], out: Path) -> int:
    """Peak resident bytes of `python -m attnlab ...` (it ends with os._exit: it cannot report
    itself), read by a small fresh interpreter that waits for it: its children's ru_maxrss."""
    argv = ["-m", "attnlab", f"model.path={folder}", "variant=mha_scaled_by_d_out", "inputs=text",
            f"inputs.text='{text}'", *words, *QUIET, f"hydra.run.dir={out}"]
    code = (f"import resource, subprocess, sys; subprocess.run([sys.executable, *{argv!r}], check=True, "
            f"stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return int(done.stdout.split()[-1]) * 1024  # KiB on Linux


def api_code(folder: Path, text: str, words: list[str], in_memory: bool) -> str:
    """`attnlab.run` with the CLI's `words`, every Result kept."""
    if in_memory:
        where = (f"from transformers import GPT2LMHeadModel\n"
                 f"model = GPT2LMHeadModel.from_pretrained({str(folder)!r}, attn_implementation='eager')\n"
                 f"where = {{'model': model, 'overrides': {[*words, *QUIET]!r}}}\n")
    else:
        where = f"where = {{'overrides': {[f'model.path={folder}', *words, *QUIET]!r}}}\n"
    return ("import torch; torch.set_num_threads(1); import attnlab\n" + where +
            f"results = attnlab.run('mha_scaled_by_d_out', inputs={{'kind': 'text', 'text': {text!r}}}, **where)\n"
            "assert all(r.record.status == 'ok' for r in (results if isinstance(results, list) else [results]))")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-tokens", type=int, default=1024)
    parser.add_argument("--n-layer", type=int, default=12)
    args = parser.parse_args()
    layer = "5" if args.n_layer > 5 else "0"
    text = text_of(args.n_tokens)
    results = []
    with tempfile.TemporaryDirectory(prefix="attnlab-api-memory-") as tmp:
        folder = save_model(Path(tmp) / "gpt2", args.n_layer)
        for title, words in ((f"layer {layer} swapped", [f"layer={layer}"]),
                             ("every layer observed", ["layer=all", "intervene=observe"])):
            cli = cli_peak(folder, text, words, Path(tmp) / "run")
            print(f"GPT-2 shape, {args.n_layer} layers, {args.n_tokens} tokens, {title}; CLI peak {cli / 2**20:.0f} MiB")
            by_path = peak_rss(api_code(folder, text, words, in_memory=False))
            results.append(verdict(f"{title}: API (model.path) / CLI peak memory", by_path / cli, 1.2,
                                   f"{by_path / 2**20:.0f} MiB"))
            in_memory = peak_rss(api_code(folder, text, words, in_memory=True))
            results.append(verdict(f"{title}: API (in-memory model) / CLI peak memory", in_memory / cli, 1.2,
                                   f"{in_memory / 2**20:.0f} MiB, the model the process loaded itself included"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
