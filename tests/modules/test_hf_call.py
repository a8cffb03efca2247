"""The mask a Hugging Face attention's model builds for it (attnlab.modules.hf_call.mask_kind), read
where neither a family row nor the class declares it: from the library's modeling file."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from attnlab.modules import hf_call  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402


@pytest.mark.parametrize(("model", "kind"), [
    ("luke", "bidirectional"),  # an encoder whose file builds create_bidirectional_mask only
    ("bros", "bidirectional"),
    ("xglm", "causal"),  # its file builds create_causal_mask
])
def test_a_class_declaring_no_mask_has_the_masks_its_file_builds(model, kind):
    module = hf_constructor(f"hf:{model}")(64, 64, 4)
    assert getattr(module, "is_causal", None) is None  # nothing declared on the class
    assert hf_call.mask_kind(module) == kind


def test_a_modeling_file_that_never_names_a_future_mask_attends_both_ways():
    """Funnel's file neither builds a mask with create_*_mask nor names causal, tril or triu; CTRL's masks
    the future with torch.triu, so it does not count as an encoder's."""
    from transformers.models.ctrl.modeling_ctrl import MultiHeadAttention
    from transformers.models.funnel.modeling_funnel import FunnelRelMultiheadAttention

    assert hf_call._encoder_file(FunnelRelMultiheadAttention)
    assert not hf_call._encoder_file(MultiHeadAttention)
