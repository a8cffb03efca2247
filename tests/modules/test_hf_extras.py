"""What a recording model is given beside its tokens when it fails on them alone (attnlab.modules.hf_extras):
layout boxes (BROS), positions from 0 (I-BERT's and LUKE's fairseq-style position table, offset by the
padding id, is as long as the run's context). With them, the classes whose inputs only their model makes
run with no error finding, and a mistake planted in a copy is still found."""

from __future__ import annotations

import pytest
import torch

import attnlab

pytest.importorskip("transformers")

from transformers import BrosConfig, IBertConfig, LukeConfig  # noqa: E402
from transformers.models.bros.modeling_bros import BrosModel, BrosSelfAttention  # noqa: E402
from transformers.models.ibert.modeling_ibert import IBertModel  # noqa: E402
from transformers.models.luke.modeling_luke import LukeSelfAttention  # noqa: E402

from attnlab.modules import hf_extras  # noqa: E402
from tests.modules.hf_runs import SIZES, assert_runs_clean, errors, softmax_over_queries  # noqa: E402

SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "intermediate_size": 64,
         "vocab_size": 100}


def test_boxes_and_positions_are_made_for_the_tokens_and_only_what_the_model_takes():
    model = BrosModel(BrosConfig(**SMALL)).eval()
    made = hf_extras.extras(model, {"input_ids": torch.ones(2, 8, dtype=torch.long)})
    assert set(made) == {"bbox", "position_ids"}
    boxes = made["bbox"]  # (b, T, 4): left, top, right, bottom
    assert tuple(boxes.shape) == (2, 8, 4)
    assert bool((boxes[..., 2] > boxes[..., 0]).all()) and bool((boxes[..., 3] > boxes[..., 1]).all())
    assert len({tuple(b.tolist()) for b in boxes[0]}) == 8  # one box per token
    assert torch.equal(made["position_ids"], torch.arange(8).expand(2, 8))
    assert hf_extras.extras(model, {"pixel_values": torch.zeros(2, 3, 8, 8)}) == {}  # no tokens to follow
    ibert = IBertModel(IBertConfig(**SMALL))
    assert set(hf_extras.extras(ibert, {"inputs_embeds": torch.zeros(2, 8, 64)})) == {"position_ids"}


def test_the_models_need_what_is_made_and_run_with_it():
    """Independently of attnlab's recorder: BROS refuses to run without boxes; I-BERT with a position
    table as long as its 8 tokens fails on its own positions (from its padding id + 1) and runs on 0..7."""
    ids = torch.arange(1, 9).expand(2, 8)  # (b, T)
    bros = BrosModel(BrosConfig(**SMALL)).eval()
    with pytest.raises(ValueError, match="specify bbox"):
        bros(input_ids=ids)
    with torch.no_grad():
        assert tuple(bros(input_ids=ids, **hf_extras.extras(bros, {"input_ids": ids})).last_hidden_state.shape) == \
            (2, 8, 64)
    ibert = IBertModel(IBertConfig(**SMALL, max_position_embeddings=8)).eval()
    with pytest.raises(IndexError):
        ibert(input_ids=ids)
    with torch.no_grad():
        assert tuple(ibert(input_ids=ids, **hf_extras.extras(ibert, {"input_ids": ids})).last_hidden_state.shape) == \
            (2, 8, 64)


class BrosSoftmaxOverQueries(BrosSelfAttention):
    """Planted: the softmax normalises each key's column (over the queries) instead of each query's row."""

    def forward(self, *args, **kwargs):
        with softmax_over_queries():
            return super().forward(*args, **kwargs)


class LukeSoftmaxOverQueries(LukeSelfAttention):
    """Planted as BrosSoftmaxOverQueries."""

    def forward(self, *args, **kwargs):
        with softmax_over_queries():
            return super().forward(*args, **kwargs)


def test_the_planted_softmax_is_real():
    """Independently of attnlab: BROS's planted weights sum to 1 over the queries, the library's over the keys."""
    config = BrosConfig(**SMALL)
    original, planted = BrosSelfAttention(config).eval(), BrosSoftmaxOverQueries(config).eval()
    planted.load_state_dict(original.state_dict())
    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    boxes = torch.rand(8, 8, 1, 16, generator=torch.Generator().manual_seed(1))  # (T, T, b, head_dim)
    with torch.no_grad():
        theirs, mine = original(x, boxes)[1], planted(x, boxes)[1]  # (b, heads, T, T)
    assert torch.allclose(theirs.sum(-1), torch.ones(1, 4, 8), atol=1e-5)
    assert torch.allclose(mine.sum(-2), torch.ones(1, 4, 8), atol=1e-5)
    luke = LukeConfig(**SMALL)
    original, planted = LukeSelfAttention(luke).eval(), LukeSoftmaxOverQueries(luke).eval()
    planted.load_state_dict(original.state_dict())
    with torch.no_grad():
        assert float((planted(x, None)[0] - original(x, None)[0]).abs().max()) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("bros", ("score_terms", "scaled_scores")),  # its query . box-position logits added before the scale
    ("ibert", None),  # its output nested, ((context,), (scaling factor,))
    ("luke", None),  # an encoder: its file builds bidirectional masks only
    ("neomme", ("qk_norm", "queries")),  # NeoMMEAttention, not the exclusive self-attention it builds inside
])
def test_a_class_whose_model_needs_more_than_tokens_runs_with_no_error_finding(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
@pytest.mark.parametrize("planted", [BrosSoftmaxOverQueries, LukeSoftmaxOverQueries])
def test_a_mistake_planted_in_a_copy_is_still_found(planted):
    result = attnlab.run(planted, overrides=SIZES)
    assert ("softmax_axis", "weights") in errors(result), [f.message for f in result.findings]
