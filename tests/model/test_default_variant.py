"""The default variant in a Hugging Face model: the book's MultiHeadAttention where it computes what
the layer computes, else a copy of the layer's own module re-run through attnlab (RoPE, a mixture of
experts, multi-head latent attention, a multi-query fused projection). Checked against the model's
own forward alone: its attention weights (`output_attentions`) and its loss on the ids."""

from __future__ import annotations

import pytest
import torch

import attnlab

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # each builds, saves and runs a whole model

IDS = [1, 5, 17, 42, 100, 7, 300, 11]
QUIET = ("log.tensorboard=false", "layer=0", "inputs=ids", f"inputs.ids=[{','.join(map(str, IDS))}]")
SMALL = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128, vocab_size=512,
             initializer_range=0.2)
CONFIGS = {
    "llama": dict(SMALL, num_key_value_heads=2),  # RoPE, grouped keys and values
    "afmoe": dict(SMALL, num_key_value_heads=2, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                  num_dense_layers=0, head_dim=16),  # a mixture of experts in every layer
    "deepseek_v3": dict(SMALL, num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4,
                        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0, kv_lora_rank=32,
                        q_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16),  # latent attention
}


def saved(model_type: str, folder, **sizes) -> torch.nn.Module:
    config = transformers.AutoConfig.for_model(model_type, **sizes)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model.save_pretrained(folder)
    return model


def own_forward(model: torch.nn.Module) -> tuple[torch.Tensor, float]:
    """(layer 0's attention weights (heads, T, T), the loss on the ids), from the model's forward alone."""
    ids = torch.tensor([IDS])  # (1, T)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, output_attentions=True, use_cache=False)
    return out.attentions[0][0], float(out.loss)


@pytest.mark.parametrize("model_type", CONFIGS)
def test_a_model_whose_attention_is_not_the_book_s_runs_its_own_class(model_type, tmp_path) -> None:
    model = saved(model_type, tmp_path, **CONFIGS[model_type])
    weights, loss = own_forward(model)
    record = attnlab.run(overrides=[f"model.path={tmp_path}", *QUIET]).record
    assert record.status == "ok", record.error
    assert record.variant.name == f"own:{type(model.model.layers[0].self_attn).__name__}"
    assert [f.code for f in record.findings if f.severity == "error"] == []
    assert not any(f.code == "query_source" for f in record.findings)  # the book's missing RoPE is not the model's
    assert record.model.effect.kl_mean < 1e-6
    assert record.model.effect.loss == pytest.approx(loss, rel=1e-5)
    captured = torch.as_tensor(record.variant.stages["weights"])[0]  # (heads, T, T)
    torch.testing.assert_close(captured, weights, atol=1e-6, rtol=1e-5)


def test_a_mistake_in_a_copy_of_the_model_s_class_is_still_found(tmp_path, use_plugins) -> None:
    """The own class is the default only: a copy of Llama's that scores without scaling, named, is found
    at the softmax's input."""
    saved("llama", tmp_path / "model", **CONFIGS["llama"])
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "llama_unscaled.py").write_text(
        "from transformers.models.llama.modeling_llama import LlamaAttention\n\n\n"
        "class LlamaUnscaled(LlamaAttention):\n"
        "    def __init__(self, config, layer_idx=None):\n"
        "        super().__init__(config, layer_idx)\n"
        "        self.scaling = 1.0\n")
    use_plugins(tmp_path / "plugins")
    record = attnlab.run("llama_unscaled", overrides=[f"model.path={tmp_path / 'model'}", *QUIET]).record
    assert record.status == "ok", record.error
    assert ("scaling", "scaled_scores") in {(f.code, f.stage) for f in record.findings if f.severity == "error"}
    assert record.model.effect.kl_mean > 1e-4


def test_the_book_s_class_stays_where_it_computes_the_layer(tmp_path) -> None:
    """GPT-2's attention is the book's: the default is its MultiHeadAttention, a KL of 0."""
    saved("gpt2", tmp_path, n_embd=64, n_head=4, n_layer=2, vocab_size=512, initializer_range=0.2)
    record = attnlab.run(overrides=[f"model.path={tmp_path}", *QUIET]).record
    assert (record.status, record.variant.name) == ("ok", "multi_head_attention")
    assert record.model.effect.kl_mean < 1e-6


def test_falcon_s_default_config_runs(tmp_path) -> None:
    """Multi-query Falcon as its config class makes it (71 query heads, one key/value head in a fused
    query_key_value 4,672 wide), one layer and a small vocabulary so it fits any machine."""
    config = transformers.FalconConfig(num_hidden_layers=1, vocab_size=512)
    assert (config.num_attention_heads, config.multi_query, config.new_decoder_architecture) == (71, True, False)
    record = attnlab.run(overrides=["model=hf:falcon", "model.num_hidden_layers=1", "model.vocab_size=512",
                                    *QUIET]).record
    assert record.status == "ok", record.error
    assert (record.variant.name, record.model.heads, record.model.kv_heads) == ("own:FalconAttention", 71, 1)
    assert [f.code for f in record.findings if f.severity == "error"] == []
    assert record.model.effect.kl_mean < 1e-6
