"""Models beyond GPT-2 and Llama: a final norm inside every block (OPT), none named as attnlab
knows it (GPT-NeoX's final_layer_norm), a per-head fused projection (GPT-NeoX), grouped keys
(Qwen2). The loss on the text is checked against the model's own `labels=` loss, never attnlab."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.inputs.text import gpt2_encoding
from tests.model.conftest import TEXT

transformers = pytest.importorskip("transformers")

SIZES = {
    "opt": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64),
    "gpt_neox": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128),
    "qwen2": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128),
    "phi": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128),
}


def save_tiny(model_type: str, folder) -> tuple:
    config = transformers.AutoConfig.for_model(model_type, vocab_size=50257, **SIZES[model_type])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("model_type", SIZES)
def test_a_layer_of_more_causal_lms_runs_with_its_own_loss(model_type, tmp_path):
    model = save_tiny(model_type, tmp_path / model_type)
    ids = torch.tensor([gpt2_encoding().encode(TEXT)])  # (1, T): a saved model without a tokenizer reads GPT-2's BPE
    with torch.no_grad():
        own_loss = float(model(input_ids=ids, labels=ids).loss)
    [result] = [attnlab.run("multi_head_attention", overrides=[
        f"model.path={tmp_path / model_type}", "inputs=text", f"inputs.text='{TEXT}'", "layer=1",
        "log.tensorboard=false"])]
    record = result.record
    assert record.status == "ok", record.error
    assert record.model.effect.loss == pytest.approx(own_loss, rel=1e-4)
    assert [f.code for f in record.findings if f.severity == "error"] == [], [f.message for f in record.findings]
