"""A Hugging Face attention class as the variant inside a Hugging Face model: Llama's own
LlamaAttention with attn_implementation=sdpa (an import-only plugin file) in a tiny Llama run eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.inputs.text import gpt2_encoding
from tests.model.conftest import TEXT

LLAMA = ["model=hf:llama", "model.num_hidden_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
         "model.num_key_value_heads=2", "model.intermediate_size=128"]


@pytest.fixture
def llama_plugin(tmp_path, use_plugins):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "llama_attention.py").write_text(
        "from transformers.models.llama.modeling_llama import LlamaAttention\n")
    use_plugins(tmp_path / "plugins")


def run_sdpa_in_eager_llama(text: str = TEXT):
    return attnlab.run("llama_attention", overrides=[*LLAMA, "+variant.params.attn_implementation=sdpa", "inputs=text",
                                                     f"inputs.text='{text}'", "layer=1", "log.tensorboard=false"])


@pytest.mark.slow
def test_llamas_sdpa_attention_in_an_eager_llama_changes_nothing(llama_plugin) -> None:
    result = run_sdpa_in_eager_llama()
    effect = result.record.model.effect
    assert result.record.weights_loaded["q_proj.weight"] == "the layer's own"
    assert abs(effect.kl_mean) < 1e-6 and effect.kl_max < 1e-5 and effect.top1_agreement == 1.0
    assert effect.hidden_relative_divergence < 1e-5
    assert result.diagnostics["divergence_weights"] < 1e-6 and result.diagnostics["divergence_output"] < 1e-5
    # independently: the same random Llama (same seed) whole, eager against sdpa, in Hugging Face alone
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnlab.modules.roles import manual_seed

    config = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=50257)
    manual_seed(123)
    eager = LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
    ids = torch.tensor([gpt2_encoding().encode(TEXT)])
    with torch.no_grad():
        base = eager(ids).logits[0]
        eager.config._attn_implementation = "sdpa"
        sdpa = eager(ids).logits[0]
    p = F.log_softmax(base, -1)
    assert float(F.kl_div(F.log_softmax(sdpa, -1), p, log_target=True, reduction="none").sum(-1).max()) < 1e-5
    assert effect.loss == pytest.approx(float(F.cross_entropy(base[:-1], ids[0, 1:])), rel=1e-5)


@pytest.mark.parametrize("text", [TEXT, "Your journey starts with one step"])  # the second once read finfo.min as a scale
@pytest.mark.slow
def test_llamas_sdpa_attention_in_an_eager_llama_gives_no_error_finding(llama_plugin, text) -> None:
    assert [f for f in run_sdpa_in_eager_llama(text).findings if f.severity == "error"] == []
