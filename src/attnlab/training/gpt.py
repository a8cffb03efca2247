"""The book's GPTModel (chapter 4) shrunk, every TransformerBlock's attention built by `make_attention`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import torch
from torch import nn

AttentionFactory = Callable[[], nn.Module]  # a (b, num_tokens, d_model) -> (b, num_tokens, d_model) module


class FeedForward(nn.Module):
    def __init__(self, emb_dim: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), nn.GELU(approximate="tanh"),
                                    nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layers(x)
        return out


class TransformerBlock(nn.Module):
    def __init__(self, emb_dim: int, make_attention: AttentionFactory, att_width: int | None = None) -> None:
        super().__init__()
        self.att = make_attention()
        # heads narrower than emb_dim / num_heads (training.model.head_dim): their side-by-side
        # width projected back to the residual stream's
        self.att_out = nn.Linear(att_width, emb_dim) if att_width not in (None, emb_dim) else None
        self.ff = FeedForward(emb_dim)
        self.norm1 = nn.LayerNorm(emb_dim)  # the book's LayerNorm: eps 1e-5, biased variance, scale and shift
        self.norm2 = nn.LayerNorm(emb_dim)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        context: torch.Tensor = self.att(self.norm1(x))  # (b, num_tokens, att_width)
        return context if self.att_out is None else self.att_out(context)  # (b, num_tokens, emb_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attend(x)  # (b, num_tokens, emb_dim)
        out: torch.Tensor = x + self.ff(self.norm2(x))  # (b, num_tokens, emb_dim)
        return out


class GPTModel(nn.Module):
    def __init__(self, vocab_size: int, context_length: int, emb_dim: int, n_layers: int,
                 make_attention: AttentionFactory, positions: bool = True, att_width: int | None = None) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, emb_dim)
        # without it, as `variant=no_positions` trains: the order of the tokens reaches the model
        # only through the causal mask
        self.pos_emb = nn.Embedding(context_length, emb_dim) if positions else None
        self.trf_blocks = nn.Sequential(*[TransformerBlock(emb_dim, make_attention, att_width) for _ in range(n_layers)])
        self.final_norm = nn.LayerNorm(emb_dim)
        self.out_head = nn.Linear(emb_dim, vocab_size, bias=False)

    def embedded(self, in_idx: torch.Tensor) -> torch.Tensor:
        tok_embeds: torch.Tensor = self.tok_emb(in_idx)  # (b, num_tokens, emb_dim)
        if self.pos_emb is None:
            return tok_embeds
        pos_embeds: torch.Tensor = self.pos_emb(torch.arange(in_idx.shape[1], device=in_idx.device))  # (num_tokens, emb_dim)
        return tok_embeds + pos_embeds  # (b, num_tokens, emb_dim)

    def forward(self, in_idx: torch.Tensor) -> torch.Tensor:
        x = self.trf_blocks(self.embedded(in_idx))  # (b, num_tokens, emb_dim)
        logits: torch.Tensor = self.out_head(self.final_norm(x))  # (b, num_tokens, vocab_size)
        return logits

    def last_logits(self, in_idx: torch.Tensor) -> torch.Tensor:
        """`forward(in_idx)[:, -1]`, computed as such: every attention layer sees the whole input,
        but the last block's feed-forward and the head (position-wise) run on the last position only."""
        x = self.embedded(in_idx)  # (b, num_tokens, emb_dim)
        *blocks, last = self.blocks()
        for block in blocks:
            x = block(x)  # (b, num_tokens, emb_dim)
        x = (x + last.attend(x))[:, -1]  # (b, emb_dim)
        x = x + last.ff(last.norm2(x))  # (b, emb_dim)
        logits: torch.Tensor = self.out_head(self.final_norm(x))  # (b, vocab_size)
        return logits

    def blocks(self) -> Iterable[TransformerBlock]:
        return cast("Iterable[TransformerBlock]", self.trf_blocks)  # nn.Sequential's items are typed as Modules

    def attention_layers(self) -> list[nn.Module]:
        return [block.att for block in self.blocks()]
