"""Writes job_outputs.json: a digest of every file a job writes, the check that work on a job's
speed changed nothing a user sees (same records, tables, pages, images, TensorBoard content).

Run from the repository root: `python tests/golden/make_job_outputs.py`. Written from the code
before the per-job speed work; later work that changes a job's files on purpose re-runs it and
says which files changed, and why, in its commit.

What is compared: every file's bytes, with what differs from run to run taken out: the output
folder's path (replaced by `<out>`), index.json's record modification time, an event's wall time
and the HParams session's start and end times; an event file's name (time, host, pid) becomes
`events.out.tfevents`. A PNG (a file, an image summary, a data URI in a page) counts as its
decoded pixels. Hydra's own `hydra.yaml` and `multirun.yaml` (its runtime: paths of this
machine), the sweep's lock file and each job's completion mark are left out.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

import attnlab

SINGLE_RUNS = {
    "unscaled@book": ("unscaled", []),
    "heads@book": ("mha_scaled_by_d_out", ["d_out=4", "num_heads=2"]),
    "heads@200": ("mha_scaled_by_d_out", ["inputs=random", "inputs.n_tokens=200", "inputs.d_in=8", "d_out=8",
                                          "num_heads=2"]),
}
SWEEP = ["variant=reference,linear,unscaled,wrong_softmax_axis", "seed=1,2,3,4,5"]  # benchmarks' figure 2c
LEFT_OUT = {"hydra.yaml", "multirun.yaml", ".attnlab-sweep.lock", ".attnlab-done.json"}
MACHINE = "machine"  # the entry that says on which float kernels the digests were written
PNG_URI = re.compile(rb"data:image/png;base64,([A-Za-z0-9+/=]+)")


def float_kernels() -> str:
    """A digest of the float kernels' rounding on this machine: a job's files hold float32 values
    (and pixels drawn from them) to the last bit, and two CPUs (AVX2 and AVX-512 builds of the same
    torch, MKL or not) round the same products, softmaxes and reductions differently. The digests are
    comparable only on a machine whose kernels round as the one that wrote them."""
    import torch
    from torch.nn import functional as F

    generator = torch.Generator().manual_seed(123)
    parts = []
    for n, d in ((6, 3), (6, 2), (200, 8), (200, 4), (64, 32)):
        x = torch.rand(2, 2, n, d, generator=generator)  # (B, nh, T, hs)
        scores = x @ x.transpose(-2, -1)  # (B, nh, T, T)
        weights = torch.softmax(scores / d ** 0.5, dim=-1)
        parts += [scores, weights, weights @ x, torch.exp(scores), scores.sum(-1), torch.tanh(scores),
                  F.scaled_dot_product_attention(x, x, x, is_causal=True), F.linear(x, x[0, 0, :d, :d])]
    return hashlib.sha256(b"".join(part.contiguous().numpy().tobytes() for part in parts)).hexdigest()


def single_run(case: str, out: Path) -> dict[str, str]:
    variant, overrides = SINGLE_RUNS[case]
    attnlab.run(variant, 123, overrides=overrides, out_dir=out)
    return digests(out)


def sweep(out: Path, *, isolation: bool = False) -> dict[str, str]:
    """The sweep of figure 2c through the real app, every job in one process (ATTNLAB_ISOLATION=0)
    or in the job worker: what a process remembers between jobs (maps, drawn text) is exercised."""
    proc = subprocess.run([sys.executable, "-m", "attnlab", "-m", *SWEEP, f"hydra.sweep.dir={out}", "log.terminal=false"],
                          env={**os.environ, "ATTNLAB_ISOLATION": "1" if isolation else "0"}, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return digests(out)


def digests(out: Path) -> dict[str, str]:
    """{path under `out` (event files by a fixed name): sha256 of the file as compared}. The event
    files of one run (a sweep's jobs share runs) are named in the order of their digests."""
    table, events = {}, {}
    for path in sorted(p for p in Path(out).rglob("*") if p.is_file() and p.name not in LEFT_OUT):
        relative = path.relative_to(out).as_posix()
        if path.name.startswith("events.out.tfevents."):
            name = "events.out.tfevents" + (".sessions" if path.name.endswith(".sessions") else "")
            events.setdefault(str(Path(relative).with_name(name)), []).append(hashlib.sha256(_events(path, out)).hexdigest())
            continue
        data = _pixels(path.read_bytes()) if path.suffix == ".png" else _text(path, out)
        table[relative] = hashlib.sha256(data).hexdigest()
    for name, found in events.items():
        table.update({name if len(found) == 1 else f"{name}[{i}]": digest for i, digest in enumerate(sorted(found))})
    return dict(sorted(table.items()))


def _pixels(png: bytes) -> bytes:
    with Image.open(io.BytesIO(png)) as image:
        return f"{image.mode} {image.size}".encode() + np.asarray(image).tobytes()


def _without_root(data: bytes, out: Path, *, markdown: bool = False) -> bytes:
    """`out` replaced by `<out>`; in markdown, whose tables pad every cell to the longest in its
    column (which may be the path), each run of spaces or of dashes as one."""
    for root in sorted({str(out), str(Path(out).resolve())}, key=len, reverse=True):
        data = data.replace(root.encode(), b"<out>")
    return re.sub(rb"( )+|(-)+", rb"\1\2", data) if markdown else data


def _text(path: Path, out: Path) -> bytes:
    data = _without_root(path.read_bytes(), out, markdown=path.suffix == ".md")
    if path.name == "index.json":
        index = json.loads(data)
        if index.get("record"):
            index["record"]["mtime_ns"] = 0
        data = json.dumps(index, sort_keys=True).encode()
    return PNG_URI.sub(lambda m: b"png-pixels:" + hashlib.sha256(_pixels(base64.b64decode(m[1]))).hexdigest().encode(), data)


def _events(path: Path, out: Path) -> bytes:
    """Every event of a TFRecord file, its times zeroed, its images as pixels and the output
    folder out of its texts, serialised again."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.plugins.hparams import plugin_data_pb2

    data, parts, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        event = Event.FromString(data[at + 12:at + 12 + length])
        at += 12 + length + 4
        event.wall_time = 0
        for value in event.summary.value:
            if value.HasField("image"):
                value.image.encoded_image_string = hashlib.sha256(_pixels(value.image.encoded_image_string)).digest()
            strings = [_without_root(s, out, markdown=True) for s in value.tensor.string_val]
            value.tensor.ClearField("string_val")
            value.tensor.string_val.extend(strings)
            if value.metadata.plugin_data.plugin_name == "hparams":
                content = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                session = content.WhichOneof("data")
                if session == "session_start_info":
                    content.session_start_info.start_time_secs = 0
                elif session == "session_end_info":
                    content.session_end_info.end_time_secs = 0
                value.metadata.plugin_data.content = content.SerializeToString(deterministic=True)
        parts.append(event.SerializeToString(deterministic=True))
    return b"\n".join(parts)


def main() -> None:
    import tempfile

    table = {}
    with tempfile.TemporaryDirectory() as folder:
        for case in SINGLE_RUNS:
            table[case] = single_run(case, Path(folder) / case)
        table["sweep"] = sweep(Path(folder) / "sweep")
    for case, files in table.items():
        print(case, len(files), "files", file=sys.stderr)
    table[MACHINE] = {"float_kernels": float_kernels()}
    Path(__file__).with_name("job_outputs.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
