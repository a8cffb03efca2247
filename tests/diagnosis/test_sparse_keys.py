"""sparse_keys: attention over each query's top-k keys by an indexer of the class's own (DeepSeek-V3.2's
DSA) is named, with the keys it drops counted independently; a mistake planted in a copy is still found."""

import math

import pytest
import torch

import attnlab
from tests.capture.test_selection import SparseKeysAttention

SMALL = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4"]


def _dropped(tokens, top_k, batch, heads):
    """(query, key) entries a causal mask keeps and a top-k drops: query i sees i + 1 keys, keeps top_k."""
    return batch * heads * sum(max(0, i + 1 - top_k) for i in range(tokens))


def _errors(result):
    return [f.code for f in result.findings if f.severity != "info"]


@pytest.mark.slow
def test_indexer_class_is_named_sparse_keys_with_no_error():
    """DeepseekV32Attention built from its config: MLA plus the DSA indexer. Its own head is compared
    (the indexer's product set apart), the selection named, no error; with index_topk=3 the keys it
    drops are the count a causal top-3 drops."""
    pytest.importorskip("transformers", reason="the Hugging Face class is the independent side")
    every = attnlab.run("hf:deepseek_v32", overrides=SMALL)
    assert every.record.status == "ok", every.record.error
    assert sorted(f.code for f in every.findings) == ["latent_attention", "sparse_keys"]
    assert "top 8 of 8 candidates" in next(f.message for f in every.findings if f.code == "sparse_keys")
    sparse = attnlab.run("hf:deepseek_v32", overrides=[*SMALL, "variant.params.index_topk=3"])
    assert sparse.record.status == "ok" and _errors(sparse) == []
    (note,) = [f for f in sparse.findings if f.code == "sparse_keys"]
    batch, heads = sparse.record.variant.stages["scaled_scores"].shape[:2]
    assert f"top 3 of 8 candidates; the softmax input masks the others: {_dropped(8, 3, batch, heads)} " in note.message


@pytest.mark.slow
def test_no_scaling_in_a_copy_of_the_indexer_class_is_still_found():
    transformers = pytest.importorskip("transformers", reason="the Hugging Face class is the independent side")
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    config = transformers.DeepseekV32Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=4)
    config._attn_implementation = "eager"
    broken = DeepseekV32Attention(config, layer_idx=0)
    broken.scaling = 1.0  # the planted mistake: the scores go to the softmax unscaled
    result = attnlab.run(broken, overrides=SMALL)
    (scaling,) = [f for f in result.findings if f.code == "scaling"]
    expected = 1 / math.sqrt(config.qk_nope_head_dim + config.qk_rope_head_dim)  # the class's head_dim
    assert scaling.severity == "error" and f"expected {expected:.4g}" in scaling.message


@pytest.mark.slow
@pytest.mark.parametrize("wrong", [False, True])
def test_a_selection_masked_the_wrong_way_is_a_mask_error_not_sparse_keys(wrong):
    """The plain-torch class over its top-3 keys: named, the dropped entries counted; the same class
    masking the kept keys instead: an error, and no sparse_keys."""
    torch.manual_seed(0)
    result = attnlab.run(SparseKeysAttention, overrides=["inputs=random", "inputs.n_tokens=6", "inputs.d_in=16",
                                                         "d_out=16", "num_heads=2", "variant.params.top_k=3",
                                                         f"variant.params.wrong={wrong}"])
    codes = [f.code for f in result.findings]
    if wrong:
        assert "sparse_keys" not in codes and _errors(result)
    else:
        assert codes == ["sparse_keys"]
        batch = result.record.variant.stages["scaled_scores"].shape[0]
        assert f"masks the others: {_dropped(6, 3, batch, 2)} " in result.findings[0].message
