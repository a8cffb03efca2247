"""Encoder–decoders whole: BART and T5 given the text to the encoder and, shifted right, to the
decoder, a self-attention of either stack swapped (`layer=encoder.N`, `layer=decoder.N`, a bare N
the encoder's) and the effect read on the decoder's logits; checked against the model's own forward
run by hand with copies written with F.scaled_dot_product_attention (tests/model/seq2seq_by_hand.py)."""

from __future__ import annotations

import pytest

from tests.model.seq2seq_by_hand import HandBartAttention, HandT5Attention, PlainT5Attention, kl_by_hand, model_by_hand
from tests.model.test_loading import refused, run

BART = {"name": "hf:bart", "d_model": 64, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
        "init_std": 0.5}  # wide: sharp attention, so a change shows
T5 = {"name": "hf:t5", "d_model": 64, "d_kv": 16, "num_heads": 4, "num_layers": 2, "d_ff": 128,
      "initializer_factor": 2.0}
SEED = 0


def _record(sizes: dict, variant: str, layer: str):
    overrides = [f"model.{key}={value}" for key, value in sizes.items() if key != "name"]
    return run(f"model={sizes['name']}", *overrides, f"layer={layer}", f"seed={SEED}", variant=variant).record


def _bart_swap(stack: str, index: int, causal: bool):
    def swap(model) -> None:
        layer = getattr(model.model, stack).layers[index]
        layer.self_attn = HandBartAttention(layer.self_attn, causal)
    return swap


@pytest.mark.parametrize("layer,variant,causal", [("encoder.1", "bidirectional_attention", False),
                                                  ("decoder.0", "multi_head_attention", True)])
@pytest.mark.slow
def test_a_correct_copy_of_bart_s_self_attention_gives_a_kl_of_zero(layer, variant, causal) -> None:
    record = _record(BART, variant, layer)
    stack, index = layer.split(".")
    assert record.model.attention == f"model.{stack}.layers.{index}.self_attn"
    assert record.model.replaced == f"{stack} self-attention" and record.model.layer_name == layer
    assert record.reference.name == f"BartAttention (layer {layer})"
    assert not [f for f in record.findings if f.severity == "error"], [f.code for f in record.findings]
    assert record.model.effect.kl_max < 1e-6
    model, given = model_by_hand(BART, SEED)
    assert kl_by_hand(model, given, _bart_swap(stack, int(index), causal)) < 1e-6  # the copy is right


def test_a_causal_variant_in_bart_s_encoder_has_the_effect_of_the_same_swap_by_hand() -> None:
    record = _record(BART, "multi_head_attention", "0")  # a bare index: the encoder's
    assert record.model.attention == "model.encoder.layers.0.self_attn"
    model, given = model_by_hand(BART, SEED)
    kl = kl_by_hand(model, given, _bart_swap("encoder", 0, causal=True))
    assert record.model.effect.kl_mean == pytest.approx(kl, rel=1e-5)
    assert kl > 1e-3


@pytest.fixture
def t5_copy(tmp_path, use_plugins):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "hand_t5_attention.py").write_text(
        "from tests.model.seq2seq_by_hand import HandT5Attention\n")
    use_plugins(tmp_path / "plugins")


def _t5_swap(stack: str, index: int, make):
    def swap(model) -> None:
        sublayer = getattr(model, stack).block[index].layer[0]
        sublayer.SelfAttention = make(sublayer.SelfAttention)
    return swap


def _copy(own):
    copy = HandT5Attention(own.config)
    copy.load_state_dict(own.state_dict())
    return copy


@pytest.mark.parametrize("layer", ["encoder.1", "decoder.1"])
@pytest.mark.slow
def test_a_copy_of_t5_s_self_attention_called_as_the_layer_was_gives_a_kl_of_zero(t5_copy, layer) -> None:
    record = _record(T5, "hand_t5_attention", layer)
    stack, index = layer.split(".")
    assert record.model.attention == f"{stack}.block.{index}.layer.0.SelfAttention"
    assert record.weights_loaded["q.weight"] == "the layer's own"
    assert record.model.effect.kl_max < 1e-6
    model, given = model_by_hand(T5, SEED)
    assert kl_by_hand(model, given, _t5_swap(stack, int(index), _copy)) < 1e-6  # the copy is right


def test_a_scaled_variant_without_t5_s_position_bias_has_the_effect_of_the_same_swap_by_hand() -> None:
    record = _record(T5, "bidirectional_attention", "encoder.0")
    model, given = model_by_hand(T5, SEED)
    n_tokens = given["input_ids"].shape[1]
    # the first layer computes the position bias every later layer adds: the swap leaves theirs
    kl = kl_by_hand(model, given, _t5_swap("encoder", 0, lambda own: PlainT5Attention(
        own, causal=False, passed_on=own.compute_bias(n_tokens, n_tokens))))
    assert record.model.effect.kl_mean == pytest.approx(kl, rel=1e-5)
    assert kl > 1e-3


def test_a_causal_variant_in_t5_s_decoder_has_the_effect_of_the_same_swap_by_hand() -> None:
    record = _record(T5, "multi_head_attention", "decoder.1")
    assert record.model.replaced == "decoder self-attention"
    model, given = model_by_hand(T5, SEED)
    kl = kl_by_hand(model, given, _t5_swap("decoder", 1, lambda own: PlainT5Attention(own, True, None)))
    assert record.model.effect.kl_mean == pytest.approx(kl, rel=1e-5)
    assert kl > 1e-3


@pytest.mark.parametrize("layer,says", [("cross.0", "layer=encoder.N or layer=decoder.N"),
                                        ("decoder.2", "decoder.0 to decoder.1")])
def test_a_cross_attention_or_a_layer_the_stack_lacks_is_refused_in_one_short_line(layer, says) -> None:
    overrides = [f"model.{key}={value}" for key, value in BART.items() if key != "name"]
    message = refused("model=hf:bart", *overrides, f"layer={layer}")
    assert len(message) <= 200 and says in message


@pytest.mark.slow
def test_a_stack_s_layer_in_a_model_of_one_stack_is_refused_in_one_short_line() -> None:
    message = refused("model=hf:gpt2", "model.n_layer=2", "layer=decoder.0")
    assert len(message) <= 200 and "layer=N" in message


def test_a_decoder_with_another_head_count_than_the_encoder_s_is_refused_in_one_short_line() -> None:
    overrides = [f"model.{key}={value}" for key, value in BART.items() if key not in ("name", "decoder_attention_heads")]
    message = refused("model=hf:bart", *overrides, "model.decoder_attention_heads=2", "layer=decoder.0")
    assert len(message) <= 200 and "model.decoder_attention_heads=2" in message and "make them equal" in message
