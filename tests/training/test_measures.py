"""A measure that does not apply to a variant is a line of the table with why, never the end of
the run: softmax-off-by-one (an extra zero logit) and sigmoid attention train to completion."""

import math

import pytest
import torch
from torch import nn

from attnlab import train
from attnlab.errors import UserError
from attnlab.training.measures import unmeasurable
from tests.training._tiny import TINY_OVERRIDES

SHORT = [*TINY_OVERRIDES, "training.steps=20", "training.eval_every=10"]


class BookHeads(nn.Module):
    """The book's MultiHeadAttention up to the scores; subclasses turn scores into weights."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def weights(self, attn_scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x):
        b, num_tokens, _ = x.shape
        split = (b, num_tokens, self.num_heads, self.head_dim)
        queries = self.W_query(x).view(split).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        keys = self.W_key(x).view(split).transpose(1, 2)
        values = self.W_value(x).view(split).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3) / self.head_dim ** 0.5  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.weights(attn_scores)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class Softmax1(BookHeads):
    """softmax-off-by-one: an extra zero logit per row, softmax, the extra column dropped."""

    def weights(self, attn_scores):
        n = attn_scores.shape[-1]
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        padded = torch.cat([attn_scores, torch.zeros_like(attn_scores[..., :1])], dim=-1)  # (..., n + 1)
        return torch.softmax(padded, dim=-1)[..., :-1]


class Sigmoid(BookHeads):
    """Sigmoid attention (Ramapuram et al.): sigmoid(scores - log n), masked; rows are no distributions."""

    def weights(self, attn_scores):
        n = attn_scores.shape[-1]
        return torch.sigmoid(attn_scores - math.log(n)).masked_fill(self.mask.bool()[:n, :n], 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("cls,why", [(Softmax1, "9 columns for 8 tokens"), (Sigmoid, "rows are not distributions")])
def test_a_variant_whose_weights_are_no_distributions_trains_to_the_end(cls, why):
    result = train(cls, "induction", n_seeds=2, overrides=SHORT)
    assert [len(run["variant"]["losses"]) for run in result.seeds] == [20, 20]
    by = {row.measure: row for row in result.rows}
    for measure in ("init_max_weight", "init_entropy", "end_entropy"):
        assert by[measure].noise.startswith("not measured: ") and why in by[measure].noise
        assert by[measure].reference.values and not by[measure].clear
    assert not any("softmax" in sentence and "at init" in sentence for sentence in result.verdict)
    assert by["causal_accuracy"].variant.values  # what does apply is measured


def test_why_a_measure_does_not_apply():
    rows = torch.softmax(torch.randn(1, 2, 4, 4), dim=-1)  # (B, H, T, T)
    assert unmeasurable(rows) is None
    assert "5 columns for 4 tokens" in unmeasurable(torch.softmax(torch.randn(1, 2, 4, 5), dim=-1))
    assert "not distributions" in unmeasurable(torch.sigmoid(torch.randn(1, 2, 4, 4)))
    assert "not distributions" in unmeasurable(torch.softmax(torch.randn(1, 2, 4, 4), dim=-2))  # over the queries


class LongerFails(Softmax1):
    """Runs on two tokens (the check before training) and fails on longer inputs."""

    def forward(self, x):
        if x.shape[1] > 2:
            raise RuntimeError("The size of tensor a (7) must match the size of tensor b (8)\nat dimension 2")
        return super().forward(x)


def test_a_class_that_fails_in_training_is_one_line_not_a_traceback():
    with pytest.raises(UserError, match=r"training stopped on seed 123: .*RuntimeError: The size of tensor a") as caught:
        train(LongerFails, "induction", overrides=SHORT)
    assert "\n" not in str(caught.value)
