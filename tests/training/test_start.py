"""The variant starts from the reference's weights: every parameter outside attention equal by
name, and the attention's projections equal to the reference's, whatever the variant's layout."""

import pytest
import torch

from attnlab.training.counterparts import counterpart
from attnlab.training.start import same_start
from tests.training._tiny import tiny


def _heads(weight, heads):
    """An nn.Linear weight (d_out, d_in) as per-head column blocks of x @ W: (heads, d_in, hs)."""
    return weight.T.reshape(weight.shape[1], heads, -1).permute(1, 0, 2)


@pytest.mark.parametrize("variant", ["unscaled", "qk_norm", "causal_mask_diagonal_0"])
def test_the_variant_starts_from_the_references_parameters(variant):
    settings = tiny()
    sizes = settings.model
    made = [counterpart(name, sizes.d_model, sizes.context_length, sizes.num_heads) for name in ("reference", variant)]
    pair = same_start(*made, vocab=8, settings=settings, seed=3)
    mine, theirs = dict(pair.variant.named_parameters()), dict(pair.reference.named_parameters())
    for name, value in theirs.items():
        if ".att." not in name:
            torch.testing.assert_close(mine[name], value, msg=name)
    reference_att, variant_att = pair.reference.attention_layers()[0], pair.variant.attention_layers()[0]
    for role in ("W_query", "W_key", "W_value"):
        expected = getattr(reference_att, role).weight  # (d_out, d_in)
        if hasattr(variant_att, "heads"):  # one module per head: head h holds columns h of the reference
            got = torch.stack([getattr(head, role).weight.T for head in variant_att.heads])  # (H, d_in, hs)
            torch.testing.assert_close(got, _heads(expected, sizes.num_heads))
        else:
            torch.testing.assert_close(getattr(variant_att, role).weight, expected)
    torch.testing.assert_close(variant_att.out_proj.weight, reference_att.out_proj.weight)


def test_unit_init_redraws_the_references_projections_with_unit_variance_scores():
    settings = tiny(init="normal", model=tiny().model.__class__(n_layers=1, d_model=64, num_heads=1, context_length=8))
    made = [counterpart(name, 64, 8, 1) for name in ("reference", "unscaled")]
    pair = same_start(*made, vocab=8, settings=settings, seed=0)
    weight = pair.reference.attention_layers()[0].W_query.weight
    assert 0.8 < weight.std().item() * 64 ** 0.5 < 1.2  # randn / sqrt(d_in)
    torch.testing.assert_close(pair.variant.attention_layers()[0].W_query.weight, weight)


def test_no_positions_is_the_reference_from_its_start_without_the_position_embedding():
    settings = tiny(model=tiny().model.__class__(n_layers=1, d_model=16, num_heads=2, context_length=8))
    made = [counterpart(name, 16, 8, 2) for name in ("reference", "no_positions")]
    pair = same_start(*made, vocab=8, settings=settings, seed=3)
    mine, theirs = dict(pair.variant.named_parameters()), dict(pair.reference.named_parameters())
    assert set(theirs) - set(mine) == {"pos_emb.weight"}
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs[name], msg=name)
    # one causal layer and no positions: the last token's prediction sees its prefix as a set
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6]])
    shuffled = torch.tensor([[4, 2, 5, 1, 3, 6]])  # the first five reordered, the last kept
    with torch.no_grad():
        torch.testing.assert_close(pair.variant.last_logits(tokens), pair.variant.last_logits(shuffled))
        assert not torch.allclose(pair.reference.last_logits(tokens), pair.reference.last_logits(shuffled))


@pytest.mark.parametrize("variant", ["unscaled", "causal_mask_diagonal_0"])
def test_narrow_heads_are_projected_back_to_the_model_width(variant):
    """training.model.head_dim=4 in a 16-wide model with 2 heads: each head 4 wide (not 8), their 8
    columns projected back to 16 by the block, from the same start on both sides."""
    from attnlab.training.settings import ModelSizes

    settings = tiny(model=ModelSizes(n_layers=1, d_model=16, num_heads=2, context_length=8, head_dim=4))
    made = [counterpart(name, 16, 8, 2, d_out=8) for name in ("reference", variant)]
    pair = same_start(*made, vocab=8, settings=settings, seed=3)
    block = pair.reference.trf_blocks[0]
    assert block.att.W_query.weight.shape == (8, 16) and block.att.head_dim == 4
    assert block.att_out.weight.shape == (16, 8)
    assert torch.equal(pair.variant.trf_blocks[0].att_out.weight, block.att_out.weight)
    tokens = torch.randint(0, 8, (2, 8))
    assert pair.variant(tokens).shape == pair.reference(tokens).shape == (2, 8, 8)
