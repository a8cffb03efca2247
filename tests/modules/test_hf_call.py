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
