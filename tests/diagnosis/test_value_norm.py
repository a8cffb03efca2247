"""A norm on the values beside QK-norm (Gemma 3n's v_norm) is said in the qk_norm finding, and only
where the values are normalised."""

from __future__ import annotations

import pytest

import attnlab

SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4"]
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("layer", [0, 4])  # a sliding layer and a full-attention one
def test_gemma3n_s_value_norm_is_said_beside_its_qk_norm(layer) -> None:
    result = attnlab.run("hf:gemma3n_text", overrides=[*SIZES, f"variant.params.layer_idx={layer}"])
    # its RoPE named as Qwen3's is, now that values normalised too no longer hide the rotation
    assert [(f.code, f.severity) for f in result.findings] == [("rotary", "info"), ("qk_norm", "info"),
                                                               ("declared_scale", "info")]
    assert "the values too have root-mean-square 1 per head" in result.findings[1].message


def test_qk_norm_alone_says_nothing_of_the_values() -> None:
    result = attnlab.run("hf:qwen3", overrides=SIZES)
    qk = [f for f in result.findings if f.code == "qk_norm"]
    assert qk and "values" not in qk[0].message
