"""Issue 44's "why sqrt(d_k)" measurement written again in plain torch, independent of attnlab's
training code, to compare attnlab's `why_sqrt_dk` preset with the issue's description.

    python benchmarks/why_sqrt_dk_plain.py 64                      # one head as wide as the model
    python benchmarks/why_sqrt_dk_plain.py 16 --d-model 64         # one head of 16 in a 64-wide model

The issue's setup as it describes it: a 2-layer GPT of the book's shape, one head, the
query/key/value weights drawn as randn / sqrt(d_in) (unit-variance scores), lr 1e-2, AdamW with
weight decay 0.1, 20 warm-up steps then cosine, gradient clip 1.0, 200 steps, induction with
vocabulary 64 and 32 tokens, batch 32; accuracy on a fixed set of 64 sequences every 10 steps
(both sides are causal, so the teacher-forced accuracy is each prefix's on its own). Prints per
side the step each seed first reached 90% (None: never), the final accuracy (mean ± std) and the
largest attention weight at init (mean over rows, layers and seeds).
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, TOKENS, BATCH = 64, 32, 32


class Attention(nn.Module):
    def __init__(self, d_model: int, d_head: int, scaled: bool) -> None:
        super().__init__()
        self.W_query, self.W_key, self.W_value = (nn.Linear(d_model, d_head, bias=False) for _ in range(3))
        self.out_proj = nn.Linear(d_head, d_model)
        self.scaled = scaled
        self.register_buffer("mask", torch.triu(torch.ones(TOKENS, TOKENS, dtype=torch.bool), diagonal=1))

    def forward(self, x: torch.Tensor, seen: list[torch.Tensor]) -> torch.Tensor:
        n = x.shape[1]
        attn_scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)  # (b, n, n)
        attn_scores = attn_scores.masked_fill(self.mask[:n, :n], -torch.inf)
        if self.scaled:
            attn_scores = attn_scores / self.W_key.out_features ** 0.5
        attn_weights = attn_scores.softmax(dim=-1)  # (b, n, n)
        seen.append(attn_weights.detach())
        return self.out_proj(attn_weights @ self.W_value(x))  # (b, n, d_model)


class Block(nn.Module):
    def __init__(self, d_model: int, d_head: int, scaled: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.att = Attention(d_model, d_head, scaled)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, seen: list[torch.Tensor]) -> torch.Tensor:
        x = x + self.att(self.norm1(x), seen)
        return x + self.ff(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, d_model: int, d_head: int, scaled: bool) -> None:
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(VOCAB, d_model), nn.Embedding(TOKENS, d_model)
        self.blocks = nn.ModuleList([Block(d_model, d_head, scaled) for _ in range(2)])
        self.final_norm, self.out_head = nn.LayerNorm(d_model), nn.Linear(d_model, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor, seen: list[torch.Tensor] | None = None) -> torch.Tensor:
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))  # (b, n, d_model)
        for block in self.blocks:
            x = block(x, [] if seen is None else seen)
        return self.out_head(self.final_norm(x))  # (b, n, vocab)


def induction(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    half = (TOKENS + 2) // 2
    first = torch.rand(n, VOCAB, generator=generator).argsort(dim=1)[:, :half]  # distinct tokens
    sequence = torch.cat([first, first], dim=1)[:, :TOKENS + 1]
    scored = torch.zeros(n, TOKENS, dtype=torch.bool)
    scored[:, half:] = True
    return sequence[:, :-1], sequence[:, 1:], scored


def run(d_model: int, d_head: int, scaled: bool, seed: int, steps: int = 200, warmup: int = 20) -> dict[str, float | None]:
    torch.manual_seed(seed)
    model = GPT(d_model, d_head, scaled)
    with torch.no_grad():
        for block in model.blocks:
            for linear in (block.att.W_query, block.att.W_key, block.att.W_value):
                linear.weight.copy_(torch.randn_like(linear.weight) / math.sqrt(linear.in_features))
    inputs, targets, scored = induction(64, torch.Generator().manual_seed(999))
    seen: list[torch.Tensor] = []
    with torch.no_grad():
        model(inputs[:8], seen)
    largest = statistics.fmean(w[:, 1:].amax(dim=-1).mean().item() for w in seen)  # the first row has one key
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup if s < warmup else
                                                  0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup))))
    generator, reached, accuracy = torch.Generator().manual_seed(seed), None, 0.0
    for step in range(1, steps + 1):
        x, y, mask = induction(BATCH, generator)
        loss = F.cross_entropy(model(x)[mask], y[mask])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 10 == 0:
            with torch.no_grad():
                accuracy = (model(inputs)[scored].argmax(dim=-1) == targets[scored]).float().mean().item()
            reached = step if reached is None and accuracy >= 0.9 else reached
    return {"reached": reached, "final": accuracy, "largest": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("d_head", type=int)
    parser.add_argument("--d-model", type=int, help="the model's width (default: d_head, one head as wide as the model)")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for scaled in (True, False):
        runs = [run(args.d_model or args.d_head, args.d_head, scaled, seed) for seed in range(1, args.seeds + 1)]
        finals = [r["final"] for r in runs]
        print(f"d_head {args.d_head} d_model {args.d_model or args.d_head} {'reference' if scaled else 'unscaled '}: "
              f"steps to 90% {[r['reached'] for r in runs]}, final {statistics.fmean(finals):.3f}±{statistics.stdev(finals):.3f}, "
              f"largest weight at init {statistics.fmean(r['largest'] for r in runs):.2f}", flush=True)


if __name__ == "__main__":
    main()
