"""Keys or values convolved over the tokens after their projection (Inkling 2's short causal
convolution, `sconv`): each row mixes its token's projection with its neighbours', so the stage is
named not observable, never read as a key of the wrong token; a kernel one token wide mixes nothing
and is still compared. The library's class gives no error finding, and a mistake planted in a copy
of it (queries projected from the previous token's row) is still found; plain torch shows the copy
computes otherwise. Query and key projections joined before one convolution (ZAYA's CCA) are no
one projection's: neither is read as the other's source."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.capture.recorder import capture


class _ConvolvedKeys(nn.Module):
    """The book's causal attention, its keys convolved over the tokens channel by channel."""

    def __init__(self, d_in: int, d_out: int, kernel: int, joined: bool = False) -> None:
        super().__init__()
        self.joined = joined
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.conv = nn.Conv1d(d_out, d_out, kernel, groups=d_out, padding=kernel - 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[1]
        queries, values = self.W_query(x), self.W_value(x)  # (b, num_tokens, d_out)
        keys = self.conv(self.W_key(x).transpose(1, 2))[..., :tokens].transpose(1, 2)  # (b, num_tokens, d_out)
        if self.joined:  # queries and keys convolved as one tensor, then split again
            both = torch.cat([queries, self.W_key(x)], dim=-1).transpose(1, 2)  # (b, 2 * d_out, num_tokens)
            mixed = nn.functional.conv1d(both, self.conv.weight.repeat(2, 1, 1), padding=2, groups=both.shape[1])
            queries, keys = mixed[..., :tokens].transpose(1, 2).chunk(2, dim=-1)  # (b, num_tokens, d_out) each
        attn_scores = queries @ keys.transpose(1, 2)  # (b, num_tokens, num_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values  # (b, num_tokens, d_out)


def test_keys_convolved_over_the_tokens_are_not_observable_and_a_one_wide_kernel_is():
    torch.manual_seed(0)
    x = torch.rand(2, 6, 8)  # (b, num_tokens, d_in)
    mixed = capture(_ConvolvedKeys(8, 8, kernel=3), x)
    assert set(mixed.unobservable) == {"keys"} and "convolved over the tokens" in mixed.unobservable["keys"]
    assert "queries" in mixed.stages and "values" in mixed.stages
    assert capture(_ConvolvedKeys(8, 8, kernel=1), x).unobservable == {}
    joined = capture(_ConvolvedKeys(8, 8, kernel=3, joined=True), x)
    assert set(joined.unobservable) == {"queries", "keys"}
    assert joined.sources["queries"] is None and joined.sources["keys"] is None  # neither the other's projection


pytest.importorskip("transformers")

from transformers.models.inkling2.modeling_inkling2 import Inkling2SlidingAttention  # noqa: E402

from tests.modules.hf_runs import SIZES, assert_runs_clean, errors, softmax_over_queries  # noqa: E402


class _Previous(nn.Linear):
    """The projection of the previous token's row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(torch.roll(x, 1, dims=-2))


class InklingPreviousQueries(Inkling2SlidingAttention):
    """Planted: queries projected from the previous token's row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q_proj.linear.__class__ = _Previous


def test_the_planted_mistake_is_real():
    from transformers import Inkling2TextConfig

    config = Inkling2TextConfig(hidden_size=64, num_attention_heads=4, swa_num_attention_heads=4, head_dim=16,
                                swa_head_dim=16, num_key_value_heads=4, swa_num_key_value_heads=4)
    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    positions = torch.arange(8)[None]  # (b, num_tokens)
    distance = positions[0, :, None] - positions[0, None, :]  # (num_tokens, num_tokens): query minus key
    torch.manual_seed(0)
    original = Inkling2SlidingAttention(config, 0).eval()
    nn.init.normal_(original.relative_position_bias.proj)  # left empty by its constructor
    copy = InklingPreviousQueries(config, 0).eval()
    copy.load_state_dict(original.state_dict())
    with torch.no_grad():
        kwargs = {"attention_mask": None, "relative_distance": distance, "position_ids": positions}
        assert (copy(x, **kwargs)[0] - original(x, **kwargs)[0]).abs().max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [("inkling2_text", ("not_observable", "keys")),
                                                 ("zaya", ("not_observable", "queries")),
                                                 # rotate_half joins a fused projection's halves, one negated: the
                                                 # join read by its parts' own roles, never by their turned columns
                                                 ("qwen3_5_vision", ("not_observable", "queries"))])
def test_the_library_class_gives_no_error_finding(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
def test_a_softmax_over_the_queries_in_zayas_class_is_still_found():
    with softmax_over_queries():
        result = attnlab.run("hf:zaya", overrides=SIZES)
    assert ("softmax_axis", "weights") in errors(result), [f.message for f in result.findings]


@pytest.mark.slow
def test_a_mistake_planted_in_a_copy_is_still_found():
    result = attnlab.run(InklingPreviousQueries, overrides=SIZES)
    assert ("query_source", "queries") in errors(result), [f.message for f in result.findings]
