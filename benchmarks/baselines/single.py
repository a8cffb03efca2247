"""Hand-written baseline for one run: what a learner would write without attnlab.

Imports torch, computes the reference and the unscaled variant with shared seeded weights
(torch.manual_seed(seed), then W_query, W_key, W_value = torch.rand(d_in, d_out)), writes the
same kind of TensorBoard scalars (max |variant - reference| per stage, softmax row sums,
entropy), four annotated heatmaps (scores, scaled scores, weights, context of the variant) drawn
with Pillow as the harness does (no matplotlib), and a CSV of the numbers.

    python benchmarks/baselines/single.py OUT_DIR [--n-tokens N --d-in D --d-out D]

Without --n-tokens it uses the book's six tokens ("Your journey starts with one step").
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.tensorboard import SummaryWriter

BOOK = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
        [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]
LABELS = ["Your", "journey", "starts", "with", "one", "step"]


def stages(x, wq, wk, wv, scaled: bool) -> dict[str, torch.Tensor]:
    queries, keys, values = x @ wq, x @ wk, x @ wv
    scores = queries @ keys.T
    scaled_scores = scores / keys.shape[-1] ** 0.5 if scaled else scores
    weights = torch.softmax(scaled_scores, dim=-1)
    return {"queries": queries, "keys": keys, "values": values, "scores": scores,
            "scaled_scores": scaled_scores, "weights": weights, "context": weights @ values}


def heatmap(values: np.ndarray, title: str, labels: list[str] | None) -> np.ndarray:
    """A quick annotated heatmap: cells coloured by value, labels and values drawn by Pillow."""
    values = values[:512, :512]
    rows, cols = values.shape
    cell = 40 if max(rows, cols) <= 16 else 1
    top, left = 30, 70 if labels else 10
    lo, hi = float(values.min()), float(values.max())
    t = (values - lo) / (hi - lo) if hi > lo else np.zeros_like(values)
    rgb = np.stack([68 + 185 * t, 1 + 230 * t, 84 - 47 * t], axis=-1).astype(np.uint8)  # dark violet -> yellow
    grid = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    canvas = np.full((top + grid.shape[0] + 10, left + grid.shape[1] + 10, 3), 255, np.uint8)
    canvas[top:top + grid.shape[0], left:left + grid.shape[1]] = grid
    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    draw.text((5, 5), title, fill=(0, 0, 0))
    if cell > 1:
        for i in range(rows):
            if labels and i < len(labels):
                draw.text((5, top + i * cell + 14), labels[i], fill=(0, 0, 0))
            for j in range(cols):
                draw.text((left + j * cell + 4, top + i * cell + 14), f"{values[i, j]:.2f}", fill=(255, 255, 255))
    return np.asarray(image)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--n-tokens", type=int)
    parser.add_argument("--d-in", type=int, default=3)
    parser.add_argument("--d-out", type=int, default=2)
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args(argv)
    if args.n_tokens:
        x = torch.rand(args.n_tokens, args.d_in, generator=torch.Generator().manual_seed(args.seed))
        labels = None
    else:
        x, labels = torch.tensor(BOOK), LABELS
    torch.manual_seed(args.seed)
    d_in = x.shape[1]
    wq, wk, wv = (torch.rand(d_in, args.d_out) for _ in range(3))
    with torch.no_grad():
        reference = stages(x, wq, wk, wv, scaled=True)
        variant = stages(x, wq, wk, wv, scaled=False)
    scalars = {}
    for name in reference:
        scalars[f"divergence/{name}"] = float((variant[name] - reference[name]).abs().max())
    weights = variant["weights"]
    scalars["weights/row_sum_max_err"] = float((weights.sum(dim=1) - 1).abs().max())
    scalars["weights/entropy_mean"] = float(-(torch.special.xlogy(weights, weights)).sum(dim=1).mean())
    scalars["reference/weights/entropy_mean"] = float(-(torch.special.xlogy(reference["weights"], reference["weights"])).sum(dim=1).mean())

    args.out.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(args.out))
    for tag, value in scalars.items():
        writer.add_scalar(tag, value, 0)
    for stage in ("scores", "scaled_scores", "weights", "context"):
        image = heatmap(variant[stage].numpy(), f"{stage} (unscaled)", labels)
        writer.add_image(f"heatmaps/{stage}", image, 0, dataformats="HWC")
    writer.close()
    with open(args.out / "comparison.csv", "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["metric", "value"])
        out.writerows(sorted(scalars.items()))
    print(f"context (unscaled):\n{variant['context'][:8]}\nwritten: {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
