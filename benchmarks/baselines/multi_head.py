"""Hand-written baseline for a multi-head comparison: what a researcher would write without attnlab.

Builds the source's MultiHeadAttention twice with shared weights (reference and variant), runs
each forward once (returning its attention weights as well), writes per-head entropy scalars and
one pooled per-head weights image per module to TensorBoard, and saves both outputs (.npy).

    python benchmarks/baselines/multi_head.py OUT_DIR [--batch B --heads H --n-tokens N --d D]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

POOLED = 512


class MultiHeadAttention(nn.Module):
    """The source's MultiHeadAttention (ch. 3), returning its weights too."""

    def __init__(self, d_in, d_out, context_length, num_heads):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
        keys, queries, values = split(self.W_key(x)), split(self.W_query(x)), split(self.W_value(x))
        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, n, n)
        attn_scores.masked_fill_(self.mask.bool()[:n, :n], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)
        return self.out_proj(context_vec), attn_weights


def pooled(weights: torch.Tensor) -> np.ndarray:
    """Block max of one item's heads, side by side, as an (1, H', W') image in [0, 1]."""
    heads = []
    for head in weights:
        n = head.shape[-1]
        step = max(1, -(-n // POOLED))
        pad = (-n) % step
        padded = torch.nn.functional.pad(head, (0, pad, 0, pad))
        heads.append(padded.view(padded.shape[0] // step, step, -1, step).amax(dim=(1, 3)))
    return torch.cat(heads, dim=1)[None].numpy()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--n-tokens", type=int, default=1024)
    parser.add_argument("--d", type=int, default=768)
    args = parser.parse_args()
    torch.manual_seed(123)
    reference = MultiHeadAttention(args.d, args.d, args.n_tokens, args.heads).eval()
    variant = MultiHeadAttention(args.d, args.d, args.n_tokens, args.heads).eval()
    variant.load_state_dict(reference.state_dict())
    x = torch.rand(args.batch, args.n_tokens, args.d)
    writer = SummaryWriter(str(args.out))
    for name, module in (("reference", reference), ("variant", variant)):
        with torch.no_grad():
            out, weights = module(x)
        entropy = -torch.special.xlogy(weights, weights).sum(-1).mean(dim=(0, 2))  # (num_heads,)
        for h, value in enumerate(entropy.tolist()):
            writer.add_scalar(f"{name}/entropy/head{h}", value, 0)
        writer.add_image(f"{name}/weights", pooled(weights[0]), 0)
        np.save(args.out / f"{name}_output.npy", out.numpy())
        del out, weights
    writer.close()


if __name__ == "__main__":
    main()
