"""Every record of a few model runs written as JSON, to compare byte for byte before and after a
change meant only to make them faster (benchmarks/results.md, "The peers' speed").

    python benchmarks/same_records.py /tmp/after.json                   # this checkout's code
    PYTHONPATH=/tmp/old/src python benchmarks/same_records.py /tmp/before.json   # another's (git archive REV src)
    cmp /tmp/before.json /tmp/after.json
    python benchmarks/same_records.py --compare /tmp/before.json /tmp/after.json   # field by field

--compare: every field equal, but for the statistics a fused pass computes in other float32 roundings
(TOLERANT: the weights' entropy from a vectorised log, scale_observed read from the masking's own fit),
which must agree to RTOL relative (benchmarks/README.md, "Every layer at 1,024 tokens").

Runs (sinks off, one torch thread): `layer=all intervene=observe` at 128 tokens (and at 1,024 with
--long) of GPT-2 small's shape saved from its config, one head ablated, one layer swapped, a 2-layer
Llama, a plain run. Timing and path fields are left out; everything else is written.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_cost import save_model, text_of  # noqa: E402  (beside this script)

OFF = ["log.tensorboard=false", "log.table=false", "log.html=false"]
TOLERANT = re.compile(r"(weights_entropy_mean|weights_entropy_norm_mean|scale_observed)(_h\d+)?$")
RTOL = 1e-6
UNSTABLE = ("seconds", "time", "elapsed", "started", "finished", "duration", "path", "scratch", "created", "host", "pid")


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not any(word in k for word in UNSTABLE)}
    return [_stable(v) for v in value] if isinstance(value, list) else value


def differences(before: Any, after: Any, where: str = "") -> list[str]:
    """Where two written files differ: every field exactly, a TOLERANT one (a list of them: per head)
    to RTOL relative."""
    if isinstance(before, dict) and isinstance(after, dict):
        if before.keys() != after.keys():
            return [f"{where}: keys {sorted(before.keys() ^ after.keys())}"]
        return [d for k in before for d in differences(before[k], after[k], f"{where}/{k}")]
    name = where.rsplit("/", 1)[-1]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        tolerant = TOLERANT.match(name) is not None  # a per-head list of one statistic
        return [d for i, (b, a) in enumerate(zip(before, after))
                for d in (differences(b, a, f"{where}[{i}]") if not tolerant else _close(b, a, f"{where}[{i}]"))]
    if TOLERANT.match(name):
        return _close(before, after, where)
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


def _close(before: Any, after: Any, where: str) -> list[str]:
    if isinstance(before, float) and isinstance(after, float) and (
            before == after or math.isclose(before, after, rel_tol=RTOL)):
        return []
    return [] if before == after else [f"{where}: {before!r} -> {after!r} (over {RTOL} relative)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--long", action="store_true", help="also layer=all at 1,024 tokens")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two written files")
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        found = differences(before, after)
        print("\n".join(found[:50]) or f"the same records (TOLERANT fields within {RTOL} relative)")
        raise SystemExit(1 if found else 0)
    import torch

    torch.set_num_threads(1)
    import attnlab
    from attnlab.record.codec import to_json_dict

    folder = Path(tempfile.gettempdir()) / "attnlab-same-records" / "gpt2"  # one path: records name their model's folder
    if not (folder / "config.json").is_file():
        save_model(folder, 12)
    saved = [f"model.path={folder}", "inputs=text"]
    runs = {"every_layer_128": [*saved, f"inputs.text='{text_of(128)}'", "layer=all", "intervene=observe"],
            "ablate_head": [*saved, f"inputs.text='{text_of(96)}'", "layer=3", "intervene=ablate_head",
                            "intervene.head=2"],
            "swap": [*saved, f"inputs.text='{text_of(64)}'", "layer=2"],
            "llama": ["model=hf:llama", "model.num_hidden_layers=2", "model.hidden_size=64",
                      "model.num_attention_heads=4", "model.num_key_value_heads=2", "model.intermediate_size=128",
                      "inputs=text", f"inputs.text='{text_of(40)}'", "layer=all", "intervene=observe"]}
    if args.long:
        runs["every_layer_1024"] = [*saved, f"inputs.text='{text_of(1024)}'", "layer=all", "intervene=observe"]
    written = {}
    for name, words in {**runs, "plain": []}.items():
        result = attnlab.run("mha_scaled_by_d_out" if words else "unscaled", overrides=[*words, *OFF])
        results = [result] if hasattr(result, "record") else list(result)
        written[name] = [to_json_dict(r.record) for r in results]
        print(name, len(results), "record(s)", flush=True)
    Path(args.out).write_text(json.dumps(_stable(written), indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
