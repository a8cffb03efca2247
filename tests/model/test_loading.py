"""Loading a model offline: a saved folder, a config class with size keys, a class of your own in
./models/ with safetensors weights; and the one-line refusals (a pickle, a model not in the local
cache, an attention layout attnlab cannot find, a layer the model lacks)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.errors import UserError
from tests.model.conftest import TEXT
from tests.model.nanogpt_style import NANOGPT_STYLE


def run(*overrides: str, variant: str = "multi_head_attention"):
    return attnlab.run(variant, overrides=["inputs=text", f"inputs.text='{TEXT}'", "log.tensorboard=false", *overrides])


def refused(*overrides: str) -> str:
    with pytest.raises(UserError) as error:
        run(*overrides)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_config_class_with_size_keys_builds_a_random_model() -> None:
    result = run("model=hf:gpt2", "model.n_layer=3", "model.n_head=2", "model.n_embd=32", "layer=2")
    assert result.record.ok and result.record.model.n_layers == 3 and result.record.model.heads == 2
    assert result.record.model.attention == "transformer.h.2.attn"
    assert result.record.model.effect.kl_max < 1e-5  # the source's MultiHeadAttention is GPT-2's computation


def test_a_size_key_the_config_class_lacks_is_refused() -> None:
    assert refused("model=hf:gpt2", "model.n_layerz=2") == "model.n_layerz: not an attribute of GPT2Config"


def test_a_layer_the_model_lacks_is_refused(tiny_gpt2) -> None:
    assert refused(f"model.path={tiny_gpt2}", "layer=7") == "layer=7: the model has 2 layers (0 to 1)"


def test_a_pickle_is_refused_with_the_conversion(tmp_path, monkeypatch) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "nano.py").write_text(NANOGPT_STYLE)
    (tmp_path / "ckpt.pth").write_bytes(b"not opened")
    monkeypatch.chdir(tmp_path)
    message = refused("model=nano", "model.weights=ckpt.pth")
    assert "never a pickle" in message and "safetensors.torch.save_file(model.state_dict(), " in message


def test_a_model_not_in_the_local_cache_says_how_to_get_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = refused("model.hub=openai-community/gpt2")
    assert message.startswith("model.hub=openai-community/gpt2: not in the local Hugging Face cache")
    assert "huggingface-cli download openai-community/gpt2" in message


def test_a_folder_with_only_pickled_weights_is_refused(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not opened")
    assert "only pickled weights (pytorch_model.bin), which attnlab never loads" in refused(f"model.path={tmp_path}")


def _nano_module(tmp_path):
    spec = importlib.util.spec_from_file_location("nano_for_test", tmp_path / "models" / "nano.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["nano_for_test"] = module
    spec.loader.exec_module(module)
    return module


def test_a_nanogpt_style_model_of_your_own_runs_with_its_safetensors(tmp_path, monkeypatch) -> None:
    from safetensors.torch import save_model

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "nano.py").write_text(NANOGPT_STYLE)
    nano = _nano_module(tmp_path)
    torch.manual_seed(1)
    model = nano.GPT(nano.GPTConfig(n_layer=2)).eval()
    save_model(model, str(tmp_path / "nano.safetensors"))  # the tie wte/lm_head stored once
    monkeypatch.chdir(tmp_path)
    result = run("model=nano", "model.n_layer=2", "model.weights=nano.safetensors", "layer=1",
                 variant="mha_scaled_by_d_out")
    assert result.record.model.attention == "transformer.h.1.attn"
    assert result.record.reference.name == "CausalSelfAttention (layer 1)"  # its own module, captured through SDPA
    # by hand: the same model with layer 1's attention scaled by 1/sqrt(d_out)
    from attnlab.inputs.text import gpt2_encoding

    ids = torch.tensor([gpt2_encoding().encode(TEXT)])
    attn = model.transformer.h[1].attn

    def scaled(x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, 4, C // 4).transpose(1, 2) for t in attn.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=C ** -0.5)  # (B, nh, T, hs)
        return attn.c_proj(y.transpose(1, 2).reshape(B, T, C))

    with torch.no_grad():
        base = model(ids, targets=ids)[0][0]  # (T, vocab)
        attn.forward = scaled
        changed = model(ids, targets=ids)[0][0]
    p, q = F.log_softmax(base.double(), -1), F.log_softmax(changed.double(), -1)  # a KL of ~1e-5 over 50,257
    kl = (p.exp() * (p - q)).sum(-1)  # entries: float32 sums round it by ~0.2%, so it is summed in float64
    assert result.record.model.effect.kl_mean == pytest.approx(float(kl.mean()), rel=1e-3)
    assert ("scaling", "scaled_scores") in {(f.code, f.stage) for f in result.findings}


def test_an_unknown_layout_names_what_it_saw_and_the_key(tmp_path, monkeypatch) -> None:
    (tmp_path / "models").mkdir()
    # neither its name nor its class's says attention (a class named ...Attention is found wherever it sits)
    (tmp_path / "models" / "nano.py").write_text(
        NANOGPT_STYLE.replace("self.attn", "self.mixer").replace("CausalSelfAttention", "TokenMixer"))
    monkeypatch.chdir(tmp_path)
    message = refused("model=nano", "model.n_layer=2")
    assert message.startswith("GPT: no attention modules found; its submodules: transformer, transformer.wte")
    assert "transformer.h.0.mixer" in message and "model.attention_path=BLOCKS.*.NAME" in message
    result = run("model=nano", "model.n_layer=2", "model.attention_path=transformer.h.*.mixer", "layer=0")
    assert result.record.model.attention == "transformer.h.0.mixer"


def test_layer_without_a_model_and_a_misspelt_key_are_refused() -> None:
    assert refused("layer=0").startswith("layer: only with a model to run in")
    assert refused("model=hf:gpt2", "model.weigths=x.safetensors") == \
        "model.weigths: unknown key; did you mean 'model.weights'?"


def test_the_preflight_counts_the_model() -> None:
    from attnlab.model.model_memory import model_peak_bytes
    from attnlab.model.sizes import ModelSizes

    sizes = ModelSizes(width=64, heads=4, kv_heads=4, context=64, vocab=50257)
    assert model_peak_bytes(3_000_000, sizes, 14, 1) - model_peak_bytes(1_000_000, sizes, 14, 1) == 8_000_000


# ATTNLAB_MEMORY_LIMIT also caps the process that runs the job (RLIMIT_DATA): through the CLI only
@pytest.mark.slow
def test_a_run_too_large_is_refused_after_its_weights_fit(app, tiny_gpt2) -> None:
    done = app(f"model.path={tiny_gpt2}", "variant=multi_head_attention", "inputs=text", "layer=0",
               env={"ATTNLAB_MEMORY_LIMIT": str(515 * 2**20)})  # its weights fit (~0.45 GiB), the run not (~0.55)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("attnlab: error: this run needs about ") and "a model of 3.3M parameters" in done.stderr


def test_a_saved_model_runs_on_its_own_tokenizer(tmp_path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["[UNK]", "Every", "every", "effort", "moves", "you", "forward", ",", "and", "step", "take", "is", "a"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(tmp_path)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=32, vocab_size=len(words),
                                       bos_token_id=None, eos_token_id=None))
    model.save_pretrained(tmp_path)
    result = run(f"model.path={tmp_path}", "layer=0")
    assert result.record.model.tokenizer != "GPT-2 BPE (tiktoken)"  # transformers names its class (TokenizersBackend)
    ids = [words.index(w) for w in ("Every", "effort", "moves", "you", "forward", ",", "and", "every", "step", "you",
                                    "take", "is", "a", "step")]
    assert result.record.labels == [words[i] for i in ids]
    with torch.no_grad():
        logits = model.eval()(torch.tensor([ids])).logits[0]
    assert result.record.model.effect.loss == pytest.approx(float(F.cross_entropy(logits[:-1], torch.tensor(ids[1:]))),
                                                                  rel=1e-5)


def test_a_misspelt_layer_is_refused_before_the_model_loads(monkeypatch) -> None:
    import attnlab.model.model_job as model_job

    monkeypatch.setattr(model_job, "load_models", lambda *a: pytest.fail("the model was loaded"))
    assert refused("model=hf:gpt2", "layer=x") == ("layer=x: must be a layer index, all, or a list of them such as "
                                                   "[0,2] (encoder.1, decoder.0 in an encoder–decoder)")


@pytest.mark.slow
def test_a_model_in_the_local_cache_loads_offline(app, tiny_gpt2, tmp_path) -> None:
    """The cache laid out as huggingface_hub lays it out (refs/main -> snapshots/<commit>/), no network."""
    import shutil

    repo = tmp_path / "hub" / "models--someone--tiny-gpt2"
    commit = "0" * 40
    shutil.copytree(tiny_gpt2, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    done = app("model.hub=someone/tiny-gpt2", "variant=multi_head_attention", "inputs=text", "layer=1", "log.tensorboard=false",
               env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.record["model"]["model"] == "someone/tiny-gpt2" and done.record["model"]["effect"]["kl_max"] < 1e-5


@pytest.mark.slow
def test_a_model_too_large_is_refused_before_it_is_built(app) -> None:
    done = app("model=hf:gpt2", "inputs=text", env={"ATTNLAB_MEMORY_LIMIT": str(600 * 2**20)})  # 124M parameters
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("attnlab: error: hf:gpt2: its weights alone need about 0.9 GiB but 0.6 GiB is "
                                   "available (ATTNLAB_MEMORY_LIMIT); shrink it (e.g. model.hidden_size=64 "
                                   "model.num_hidden_layers=2 model.max_position_embeddings=512)")
