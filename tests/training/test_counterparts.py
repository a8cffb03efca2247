"""The multi-head causal counterparts compute what their name says, checked against PyTorch's SDPA: a
book name trains as the zoo's multi-head class it declares (`multi_head=`)."""

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab import train
from attnlab.errors import UserError
from attnlab.modules.registry import get_variant
from attnlab.training.counterparts import PerHeadAttention, counterpart
from tests.training._tiny import TINY_OVERRIDES

B, T, D, H = 2, 5, 8, 2


def _sdpa(module, x, **kwargs):
    """The same module's projections through F.scaled_dot_product_attention."""
    def split(t):
        return t.view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, hs)

    q, k, v = split(module.W_query(x)), split(module.W_key(x)), split(module.W_value(x))
    context_vec = F.scaled_dot_product_attention(q, k, v, **kwargs).transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    return module.out_proj(context_vec)


@pytest.mark.parametrize("change,kwargs", [
    ("reference", {"is_causal": True}),
    ("unscaled", {"is_causal": True, "scale": 1.0}),
    ("scaled_by_dk", {"is_causal": True, "scale": 1 / (D // H)}),
    ("causal_mask_missing", {"is_causal": False}),
])
def test_a_book_change_trains_as_its_multi_head_counterpart_matching_sdpa(change, kwargs):
    torch.manual_seed(0)
    module, x = counterpart(change, D, T, H).make(), torch.randn(B, T, D)
    assert type(module) is get_variant(f"builtin:{get_variant(change).multi_head}").cls
    torch.testing.assert_close(module(x), _sdpa(module, x, **kwargs))


def test_wrong_softmax_axis_normalises_each_key_over_its_queries():
    torch.manual_seed(0)
    module, x = counterpart("wrong_softmax_axis", D, T, H).make(), torch.randn(B, T, D)
    q = module.W_query(x).view(B, T, H, D // H).transpose(1, 2)
    k = module.W_key(x).view(B, T, H, D // H).transpose(1, 2)
    scores = (q @ k.transpose(2, 3) / (D // H) ** 0.5).masked_fill(torch.ones(T, T).triu(1).bool(), -torch.inf)
    weights = torch.softmax(scores, dim=-2)  # (B, H, T, T): each column sums to one
    v = module.W_value(x).view(B, T, H, D // H).transpose(1, 2)
    expected = module.out_proj((weights @ v).transpose(1, 2).reshape(B, T, D))
    torch.testing.assert_close(module(x), expected)


def test_reference_is_the_books_multi_head_attention():
    made = counterpart("reference", D, T, H).make()
    assert type(made).__name__ == "MultiHeadAttention"
    torch.manual_seed(0)
    x = torch.randn(B, T, D)
    torch.testing.assert_close(made(x), _sdpa(made, x, is_causal=True))


def test_a_modern_variant_is_built_as_declared_and_a_single_head_causal_class_per_head():
    assert type(counterpart("qk_norm", D, T, H).make()).__name__ == "QKNormAttention"
    wrapped = counterpart("mha_wrapper", D, T, H).make()  # takes num_heads: built as it is
    assert type(wrapped).__name__ == "MultiHeadAttentionWrapper"
    per_head = counterpart("causal_mask_diagonal_0", D, T, H).make()
    assert isinstance(per_head, PerHeadAttention) and len(per_head.heads) == H
    assert per_head(torch.randn(B, T, D)).shape == (B, T, D)


def test_a_2d_class_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"SelfAttentionTransposedScores\(8, 8\) is all attnlab could fill: no context length") as caught:
        counterpart("transposed_scores", D, T, H)
    assert "\n" not in str(caught.value)


def test_a_plugin_of_yours_named_after_a_book_change_trains_as_yours_and_builtin_reaches_the_change(use_plugins, tmp_path):
    from attnlab.plugin_folders import builtin_plugin_dir

    folder = tmp_path / "mine"
    folder.mkdir()
    source = (builtin_plugin_dir() / "variants" / "multi_head_attention.py").read_text()
    (folder / "unscaled.py").write_text(source.replace('"multi_head_attention",', '"unscaled",')
                                        .replace("class MultiHeadAttention", "class MyUnscaled"))
    use_plugins(folder)
    assert counterpart("unscaled", D, T, H).describe.startswith("MyUnscaled (unscaled)")
    assert counterpart("builtin:unscaled", D, T, H).describe.startswith("MultiHeadAttention (mha_unscaled)")
    reference = counterpart("reference", D, T, H).make()
    assert type(reference).__name__ == "MultiHeadAttention"  # training's reference stays the book's


@dataclass
class WidthConfig:
    """A config with the sizes and no context length."""

    n_embd: int = 16
    n_head: int = 2


class ConfigBuilt(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        return self.proj(x)


class TwoD(nn.Module):
    """SelfAttention_v1-like: (d_in, d_out), no mask."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out)

    def forward(self, x):
        return self.W_query(x)


@pytest.mark.parametrize("cls,given", [(ConfigBuilt, "ConfigBuilt(config: WidthConfig, filled as 16, 16, num_heads=2)"), (TwoD, "TwoD(16, 16)")])
def test_a_class_without_a_context_length_is_refused_naming_what_fits(cls, given):
    with pytest.raises(UserError) as caught:
        train(cls, "induction", overrides=TINY_OVERRIDES)
    message = str(caught.value)
    assert given in message and "no context length" in message and "\n" not in message
    assert "Cls(d_in, d_out, context_length, dropout, num_heads)" in message and "Cls(config)" in message
    assert not any(mistake in message for mistake in ("unscaled", "wrong_softmax_axis", "causal_mask_missing"))
