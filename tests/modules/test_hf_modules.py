"""Hugging Face and nanoGPT attention classes run with zero edits, and correct code is never
reported wrong.

Every class is built from its own config class at hidden 64, 4 heads, 1-4 key/value heads and 8
random tokens; nothing is downloaded. The matrix runs in-process through `attnlab.run`. The
expected numbers come from the classes themselves (their own returned attention weights, their
own eager against their own sdpa path) and from the config values the test sets, never from
attnlab.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from tests.modules.hf_runs import SIZES

transformers = pytest.importorskip("transformers")
from transformers import masking_utils  # noqa: E402

PLUGINS = Path(__file__).parent / "hf_plugins"

# model type: (the info findings its declared changes call for at the config's defaults, kv heads it takes)
MODELS = {
    "llama": ({"rotary"}, True),
    "qwen3": ({"rotary", "qk_norm"}, True),
    "mistral": ({"rotary"}, True),
    "gemma2": ({"rotary", "declared_scale"}, True),  # query_pre_attn_scalar 256 != head_dim 16
    "gemma3": ({"rotary", "qk_norm", "declared_scale"}, True),
    "gpt2": (set(), False),
    "bert": (set(), False),
}
# transformers refuses sdpa with Gemma2's soft cap (on by default): Gemma2's sdpa runs without it
NO_CAP = {"gemma2": ["variant.params.attn_logit_softcapping=null"]}


def run(variant: str, *overrides: str):
    result = attnlab.run(variant, overrides=[*SIZES, *overrides])
    assert result.record.status == "ok", result.record.error
    return result


def codes(result, severity: str | None = None) -> set[str]:
    return {f.code for f in result.findings if severity is None or f.severity == severity}


def matrix() -> list[tuple[str, str, int | None]]:
    cells = []
    for model, (_, grouped) in MODELS.items():
        for implementation in ("eager", "sdpa"):
            for kv_heads in ((1, 2, 4) if grouped else (None,)):
                cells.append((model, implementation, kv_heads))
    return cells


def _cell(model: str, implementation: str, kv_heads: int | None) -> list[str]:
    words = [f"attn_implementation={implementation}"]
    words += [f"num_kv_heads={kv_heads}"] if kv_heads else []
    return words + (NO_CAP.get(model, []) if implementation == "sdpa" else [])


@pytest.mark.parametrize("model,implementation,kv_heads", matrix())
def test_a_hugging_face_class_against_auto_has_no_error_and_the_info_its_config_declares(model, implementation,
                                                                                        kv_heads):
    result = run(f"hf:{model}", *_cell(model, implementation, kv_heads))
    expected, _ = MODELS[model]
    assert codes(result, "error") == set(), [f.message for f in result.findings]
    assert codes(result, "warning") == set(), [f.message for f in result.findings]
    assert codes(result, "info") == expected  # no kv_heads: auto groups its keys as the config does
    assert result.record.missing_stages == []  # GPT-2's Conv1D projects with torch.addmm


@pytest.mark.parametrize("model,implementation,kv_heads", [c for c in matrix() if c[1] == "eager"])
def test_a_hugging_face_class_eager_against_its_own_sdpa_diverges_nowhere(model, implementation, kv_heads):
    words = [w for w in _cell(model, "eager", kv_heads)] + NO_CAP.get(model, [])
    result = run(f"hf:{model}", *words, f"reference=hf:{model}", "reference.params.attn_implementation=sdpa",
                 *[w.replace("variant.params", "reference.params") for w in NO_CAP.get(model, [])])
    assert result.record.reference.name == f"hf:{model}"
    assert result.findings == [], [f.message for f in result.findings]
    assert result.first_divergent_stage is None


@pytest.mark.parametrize("reference_window,diverges", [(3, False), (None, True)])
def test_reference_params_reach_the_reference(reference_window, diverges):
    """Mistral's eager with a window of 3 against its sdpa: the same window only when it is passed on."""
    words = [f"reference.params.sliding_window={reference_window}"] if reference_window else []
    result = run("hf:mistral", "variant.params.sliding_window=3", "reference=hf:mistral",
                 "reference.params.attn_implementation=sdpa", *words)
    assert (result.first_divergent_stage is not None) == diverges
    assert ("window" in codes(result)) == diverges


def _hf_module(model: str, seed: int, kv_heads: int | None):
    """The class built as a user would, after torch.manual_seed(seed) (attnlab's weights=native)."""
    from attnlab.modules.hf import attention_class

    cls, config_cls = attention_class(model)
    spelled = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 8}
    if model in ("gpt2",):
        spelled = {"n_embd": 64, "n_head": 4, "n_positions": 8, "attn_pdrop": 0.0}
    if model == "bert":
        spelled["attention_probs_dropout_prob"] = 0.0
    if kv_heads:
        spelled.update(num_key_value_heads=kv_heads, head_dim=16, attention_dropout=0.0, attention_bias=False)
    config = config_cls(**spelled)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return cls(config=config, layer_idx=0).eval()  # as the model's own layer builds it


def _returned_weights(module, x: torch.Tensor) -> torch.Tensor:
    """The module's own attention weights, called as its model calls it."""
    config, tokens = module.config, x.shape[1]
    position_ids = torch.arange(tokens).expand(x.shape[0], tokens)
    kwargs = {}
    if getattr(module, "is_causal", True):
        window = getattr(module, "sliding_window", None)
        make = masking_utils.create_sliding_window_causal_mask if window else masking_utils.create_causal_mask
        kwargs["attention_mask"] = make(config=config, inputs_embeds=x, attention_mask=None, past_key_values=None,
                                        position_ids=position_ids)
    rotary = [v for k, v in vars(sys.modules[type(module).__module__]).items() if k.endswith("RotaryEmbedding")]
    if rotary:
        emb = rotary[0](config=config)
        layer_type = getattr(module, "layer_type", None) or "full_attention"  # Gemma3: one rotary per layer type
        takes_type = "layer_type" in inspect.signature(emb.forward).parameters
        kwargs["position_embeddings"] = emb(x, position_ids, layer_type) if takes_type else emb(x, position_ids)
    with torch.no_grad():
        return module(x, **kwargs)[1]


@pytest.mark.parametrize("model,kv_heads", [(m, 2 if g else None) for m, (_, g) in MODELS.items()])
def test_the_captured_weights_are_the_weights_the_module_itself_returns_on_its_eager_path(model, kv_heads):
    words = _cell(model, "eager", kv_heads)
    result = run(f"hf:{model}", *words, "weights=native", "batch=1")
    module = _hf_module(model, 123, kv_heads)
    x = torch.tensor(result.record.variant.stages["inputs"])  # (1, num_tokens, d_in)
    returned = _returned_weights(module, x)  # (1, num_heads, num_tokens, num_tokens)
    torch.testing.assert_close(torch.tensor(result.record.variant.stages["weights"]), returned, rtol=0, atol=0)


# -- declared changes that stack -------------------------------------------------------------------

def test_gemma2s_soft_cap_window_scale_rope_and_grouping_are_each_named():
    result = run("hf:gemma2", "num_kv_heads=2", "variant.params.attn_logit_softcapping=2.0",
                 "variant.params.sliding_window=3")
    assert codes(result, "error") == set(), [f.message for f in result.findings]
    assert codes(result, "info") == {"rotary", "declared_scale", "softcap", "window"}
    softcap = next(f for f in result.findings if f.code == "softcap")
    assert "2.0 * tanh(s / 2.0)" in softcap.message
    scale = next(f for f in result.findings if f.code == "declared_scale")
    assert "0.0625" in scale.message and "query_pre_attn_scalar" in scale.message  # 256 ** -0.5


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_mistrals_sliding_window_is_named_on_both_paths(implementation):
    result = run("hf:mistral", f"attn_implementation={implementation}", "num_kv_heads=2",
                 "variant.params.sliding_window=3")
    assert codes(result, "error") == set(), [f.message for f in result.findings]
    assert codes(result, "info") == {"rotary", "window"}
    assert "a sliding window of 3" in next(f.message for f in result.findings if f.code == "window")


def test_a_bert_self_attention_gets_a_bidirectional_reference_without_an_output_projection():
    result = run("hf:bert")
    assert result.record.reference.name == "bidirectional_heads"
    assert result.findings == []


# -- nanoGPT, pasted verbatim ------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["nanogpt_flash", "nanogpt_manual"])
@pytest.mark.slow
def test_nanogpts_causal_self_attention_pasted_verbatim_runs_without_findings(use_plugins, variant):
    use_plugins(PLUGINS)
    result = run(variant)
    assert result.record.reference.name == "multi_head_attention"
    assert result.findings == [], [f.message for f in result.findings]
    assert result.record.missing_stages == []


@pytest.mark.slow
def test_nanogpts_flash_path_against_its_manual_path_diverges_nowhere(use_plugins):
    use_plugins(PLUGINS)
    result = run("nanogpt_flash", "reference=nanogpt_manual")
    assert result.findings == [] and result.first_divergent_stage is None


# -- planted mistakes in copies of Llama's attention ------------------------------------------------

PLANTED = {  # plugin: (code, stage) of the mistake
    "llama_unscaled": ("scaling", "scaled_scores"),
    "llama_rotary_queries_only": ("rotary_misapplied", "keys"),
    "llama_mask_offset": ("mask_offset", "scaled_scores"),
    "llama_softmax_query_axis": ("softmax_axis", "weights"),
    "llama_head_merge": ("head_merge", "output"),
    "llama_values_from_keys": ("value_path", "values"),  # the rotation on queries and keys still named
}


@pytest.mark.parametrize("variant", sorted(PLANTED))
def test_a_mistake_planted_in_llamas_attention_is_found_at_its_stage(use_plugins, variant):
    use_plugins(PLUGINS)
    result = run(variant, "num_kv_heads=2")
    errors = [(f.code, f.stage) for f in result.findings if f.severity == "error"]
    assert errors == [PLANTED[variant]], [f.message for f in result.findings]


def test_the_planted_mistakes_are_real(use_plugins):
    """Independently of attnlab: each planted copy's output differs from LlamaAttention's own on the
    same weights, and the planted copy with every flag at its default equals it."""
    use_plugins(PLUGINS)
    sys.path.insert(0, str(PLUGINS))
    try:
        from _llama_copy import LlamaCopy
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
    finally:
        sys.path.remove(str(PLUGINS))
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    config._attn_implementation = "eager"
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    position_ids = torch.arange(8).expand(2, 8)
    mask = masking_utils.create_causal_mask(config=config, inputs_embeds=x, attention_mask=None,
                                            past_key_values=None, position_ids=position_ids)
    rotary = LlamaRotaryEmbedding(config)(x, position_ids)
    torch.manual_seed(0)
    original = LlamaAttention(config, 0).eval()
    outputs = {}
    for name, change in {"none": {}, "rotate_keys": {"rotate_keys": False}, "mask": {"mask_diagonal": 2},
                         "softmax": {"softmax_dim": -2}, "merge": {"transpose_heads": False},
                         "values": {"values_proj": "k_proj"}}.items():
        copy = type("Planted", (LlamaCopy,), change)(config, 0).eval()
        copy.load_state_dict(original.state_dict())
        with torch.no_grad():
            outputs[name] = copy(x, position_embeddings=rotary, attention_mask=mask)[0]
    with torch.no_grad():
        expected = original(x, position_embeddings=rotary, attention_mask=mask)[0]
    torch.testing.assert_close(outputs.pop("none"), expected)
    for name, out in outputs.items():
        assert (out - expected).abs().max() > 1e-3, name


# -- what was returned, and errors --------------------------------------------------------------------

def test_the_record_says_what_forward_returned_and_which_element_is_the_output():
    result = run("hf:llama")
    assert result.record.returned == "tuple(Tensor (2, 8, 64), Tensor (2, 4, 8, 8))"
    assert result.record.output_element == "[0]"
    assert result.record.returned_weights == "equal to the captured weights"


def test_a_module_whose_own_call_fails_reports_its_own_error_not_a_fallback():
    result = attnlab.run("hf:gemma2", overrides=[*SIZES, "attn_implementation=sdpa"])
    assert result.record.status == "failed"
    assert "`sdpa` attention does not support `softcap`" in result.record.error
    assert "\n" not in result.record.error


def test_an_attribute_the_config_class_lacks_is_a_one_line_error():
    from attnlab.errors import UserError

    with pytest.raises(UserError, match=r"variant.params.sliding_windw: MistralConfig has no attribute "
                                        r"'sliding_windw'; did you mean 'sliding_window'"):
        attnlab.run("hf:mistral", overrides=[*SIZES, "variant.params.sliding_windw=3"])


def test_the_default_sizes_say_which_sizes_the_class_needs():
    from attnlab.errors import UserError

    with pytest.raises(UserError, match=r"d_out must equal d_in"):
        attnlab.run("hf:llama")


def test_without_transformers_an_hf_name_is_a_one_line_error_naming_the_extra(monkeypatch):
    from attnlab.errors import UserError
    from attnlab.modules import hf, registry

    monkeypatch.setitem(sys.modules, "transformers", None)
    hf.attention_class.cache_clear()
    registry._hf_spec.cache_clear()
    try:
        with pytest.raises(UserError, match=r"pip install 'attnlab\[hf\]'"):
            attnlab.run("hf:llama", overrides=SIZES)
    finally:
        hf.attention_class.cache_clear()
        registry._hf_spec.cache_clear()


def test_an_unknown_model_type_names_the_closest():
    from attnlab.errors import UserError

    with pytest.raises(UserError, match=r"no model type 'lama'; did you mean 'hf:llama'"):
        attnlab.run("hf:lama", overrides=SIZES)


# -- import-only plugin files ------------------------------------------------------------------------

IMPORTS = Path(__file__).parent / "hf_imports"


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.slow
def test_an_import_only_plugin_file_runs_as_the_hf_name_does(use_plugins, model):
    """`from transformers.models.llama.modeling_llama import LlamaAttention` alone in llama_attention.py."""
    use_plugins(IMPORTS)
    words = ["num_kv_heads=2"] if MODELS[model][1] else []
    by_file, by_name = run(f"{model}_attention", *words), run(f"hf:{model}", *words)
    assert [(f.code, f.stage) for f in by_file.findings] == [(f.code, f.stage) for f in by_name.findings]
    assert by_file.record.reference.name == by_name.record.reference.name
    torch.testing.assert_close(torch.tensor(by_file.stages["output"]), torch.tensor(by_name.stages["output"]),
                               rtol=0, atol=0)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_under_gqa_against_a_reference_that_groups_otherwise_rope_and_the_grouping_are_both_named(implementation):
    """Eager keys come after repeat_kv (4 heads), sdpa's before (2): either way compared per kv head."""
    result = run("hf:llama", f"attn_implementation={implementation}", "num_kv_heads=2",
                 "reference=multi_head_attention")
    assert codes(result, "error") == set(), [f.message for f in result.findings]
    assert codes(result, "info") == {"rotary", "kv_heads"}
    assert result.record.variant.diagnostics["divergence_values"] == 0.0  # kv head g holds the reference's head 2g


# classes whose layouts or position encodings correct code used to be reported wrong on
MORE_MODELS = {
    "phi": {"rotary"},  # a partial RoPE
    "stablelm": {"rotary"},  # a partial RoPE
    "gpt_neox": {"rotary"},  # each head's query, key and value side by side in query_key_value; a partial RoPE
    "olmo2": {"rotary", "qk_norm"},  # QK-norm over the whole projection, before the heads are split
    "phi3": {"rotary"},  # a fused qkv_proj, whose name reads as v_proj
    "distilbert": set(),  # out_lin, its output projection
    "gptj": {"rotary"},  # its config's default rotary_dim is wider than a head of this size
    "persimmon": {"rotary", "qk_norm"},  # QK-norm as a LayerNorm of each head, then a partial RoPE
    "falcon": {"rotary"},  # forward takes an alibi argument (None: its config chose RoPE); one kv head, as auto groups
}


@pytest.mark.parametrize("model", MORE_MODELS)
def test_more_layouts_and_position_encodings_are_named_not_reported_wrong(model):
    result = run(f"hf:{model}")
    assert codes(result, "error") == set(), [f.message for f in result.findings]
    assert codes(result, "warning") == set(), [f.message for f in result.findings]
    assert codes(result, "info") == MORE_MODELS[model]


def test_a_partial_rope_names_the_coordinates_its_config_turns():
    config = transformers.GPTNeoXConfig()
    head_dim = 64 // 4
    turned = int(head_dim * config.rope_parameters["partial_rotary_factor"])
    (rotary,) = [f for f in run("hf:gpt_neox").findings if f.code == "rotary"]
    assert f"over the first {turned} of their {head_dim} coordinates" in rotary.message
    assert f"the other {head_dim - turned} pass through unturned" in rotary.message


def test_gpt_neox_fused_projection_is_read_per_head_as_the_class_splits_it():
    """read_projections against the split GPTNeoXAttention.forward makes: the fused output viewed as
    (heads, 3 * head_dim) and chunked into query, key and value."""
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention

    from attnlab.modules.layouts import read_projections

    config = transformers.GPTNeoXConfig(hidden_size=64, num_attention_heads=4, attention_bias=True)
    module = GPTNeoXAttention(config, layer_idx=0)
    x = torch.randn(1, 5, 64)
    with torch.no_grad():
        theirs = module.query_key_value(x).view(1, 5, 4, 3 * 16).chunk(3, dim=-1)  # each (1, 5, 4, 16)
    read = read_projections(module, num_heads=4)
    for role, weight, bias in (("queries", read.W_query, read.b_query), ("keys", read.W_key, read.b_key),
                               ("values", read.W_value, read.b_value)):
        mine = x @ weight + bias  # (1, 5, 64): head h in columns h*16:(h+1)*16
        assert torch.allclose(mine, theirs[("queries", "keys", "values").index(role)].flatten(-2), atol=1e-6), role


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_a_variant_without_the_references_rope_is_told_as_such_whatever_the_grouping(kv_heads):
    """The source's MultiHeadAttention against Llama's class: the reference rotates, the variant
    does not; its keys take the reference's grouped ones, so nothing else is reported."""
    result = run("multi_head_attention", "reference=hf:llama", f"num_kv_heads={kv_heads}")
    assert codes(result) == {"rotary"}, [f.message for f in result.findings]
    (rotary,) = result.findings
    assert rotary.message.startswith("the reference applies a rotary position embedding (RoPE) that the variant "
                                     "does not"), rotary.message
    assert "theta (base) 10000" in rotary.message  # LlamaConfig's default rope_theta
    loaded = result.record.weights_loaded
    assert all(loaded[f"W_{role}.weight"].startswith("shared") for role in ("query", "key", "value")), loaded


def _by_hand(x: torch.Tensor, read, heads: int) -> torch.Tensor:
    """Causal attention of the projections with F.scaled_dot_product_attention, then the output projection."""
    def split(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (-1, read.head_dim)).transpose(1, 2)  # (b, h, t, hs)
    q, k, v = (split(x @ w + b) for w, b in ((read.W_query, read.b_query), (read.W_key, read.b_key),
                                              (read.W_value, read.b_value)))
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (b, h, t, hs)
    context = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, t, hs)
    return context.transpose(1, 2).flatten(-2) @ read.W_out + read.b_out  # (b, t, d_out)


@pytest.mark.parametrize("multi_query", [True, False])
def test_gpt_bigcode_fused_c_attn_is_read_and_loaded_as_the_class_splits_it(multi_query):
    """GPTBigCode's c_attn holds [q | k | v] with one key/value head under multi_query, else each
    head's query, key and value side by side: the projections read from the class, and random ones
    loaded into it, give the class's own output by F.scaled_dot_product_attention."""
    from transformers.models.gpt_bigcode.modeling_gpt_bigcode import GPTBigCodeAttention

    from attnlab.modules.layouts import load_projections, read_projections

    config = transformers.GPTBigCodeConfig(n_embd=64, n_head=4, multi_query=multi_query, attn_pdrop=0.0,
                                           resid_pdrop=0.0)
    config._attn_implementation = "sdpa"
    module = GPTBigCodeAttention(config, layer_idx=0).eval()
    x = torch.randn(2, 5, 64)
    with torch.no_grad():
        read = read_projections(module, num_heads=4)
        assert read.num_kv_heads == (1 if multi_query else 4)
        assert torch.allclose(module(x)[0], _by_hand(x, read, 4), atol=1e-5)
        drawn = type(read)(**{**vars(read), **{f: torch.randn_like(getattr(read, f))
                                               for f in ("W_query", "W_key", "W_value", "b_key")}})
        load_projections(module, drawn, num_heads=4)
        assert torch.allclose(module(x)[0], _by_hand(x, drawn, 4), atol=1e-5)
