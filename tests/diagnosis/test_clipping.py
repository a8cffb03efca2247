"""A clamp of the projections the module's config declares (OLMo's clip_qkv) is named, never read
as a wrong query source; a clamp to another bound than the declared one is still an error."""

from __future__ import annotations

import pytest

import attnlab

SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4"]
transformers = pytest.importorskip("transformers")


def _olmo(bound: str, implementation: str = "eager", variant: object = "hf:olmo") -> attnlab.Result:
    return attnlab.run(variant, overrides=[*SIZES, f"variant.params.clip_qkv={bound}",
                                           f"attn_implementation={implementation}"])


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("bound", ["0.05", "0.5"])
def test_olmo_s_declared_clip_is_named_not_a_query_source(bound, implementation) -> None:
    result = _olmo(bound, implementation)
    assert [(f.code, f.severity) for f in result.findings] == [("clipped_qkv", "info")]
    message = result.findings[0].message
    assert f"+-{bound}" in message and f"clip_qkv={bound}" in message and "theta (base) 10000" in message


def test_without_a_clip_olmo_is_rope_alone() -> None:
    assert [f.code for f in _olmo("null").findings] == ["rotary"]


def test_a_clamp_to_another_bound_than_the_declared_one_is_an_error(monkeypatch) -> None:
    from transformers.models.olmo import modeling_olmo

    declared = modeling_olmo.OlmoAttention.forward

    def clamps_twice_as_wide(self, hidden_states, position_embeddings, attention_mask, **kwargs):
        self.config.clip_qkv, bound = 2 * self.config.clip_qkv, self.config.clip_qkv
        try:
            return declared(self, hidden_states, position_embeddings, attention_mask, **kwargs)
        finally:
            self.config.clip_qkv = bound

    monkeypatch.setattr(modeling_olmo.OlmoAttention, "forward", clamps_twice_as_wide)
    result = _olmo("0.05")
    codes = {(f.code, f.severity) for f in result.findings}
    assert result.record.status == "ok", result.record.error
    assert ("clipped_qkv", "info") not in codes and any(severity == "error" for _, severity in codes)
