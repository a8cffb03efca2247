"""The rule every check holds to: a stage attnlab cannot place is named "not observable" (info)
and never compared, and with shared weights no error is reported at a stage when nothing attnlab
can place from that stage on differs from the reference."""

from __future__ import annotations

from dataclasses import replace

import torch

import attnlab
from attnlab.capture.recorder import capture
from attnlab.diagnosis.analysis import analyse


def _captures():
    torch.manual_seed(0)
    module = attnlab.create_variant("multi_head_attention", 5, 8, num_heads=2, context_length=6).eval()
    x = torch.randn(2, 6, 5)
    return capture(module, x), capture(module, x)


def test_a_source_error_with_nothing_different_downstream_is_not_reported():
    variant, reference = _captures()
    misread = replace(variant, sources={**variant.sources, "queries": "keys"})  # a provenance attnlab got wrong
    assert analyse(misread, reference, weights_shared=True).findings == []
    # with weights of its own nothing is compared, and the source is all there is to go by
    unshared = analyse(misread, reference, weights_shared=False).findings
    assert [(f.code, f.severity) for f in unshared] == [("query_source", "error")]


def test_a_stage_that_cannot_be_placed_is_named_and_never_compared():
    variant, reference = _captures()
    keys = torch.roll(variant.stages["keys"], 1, dims=-2)  # what a misplaced read would look like
    unplaced = replace(variant, stages={**variant.stages, "keys": keys},
                       unobservable={"keys": "not 2 batch items of 6 rows each"})
    findings = analyse(unplaced, reference, weights_shared=True).findings
    assert [(f.code, f.stage, f.severity) for f in findings] == [("not_observable", "keys", "info")]
    assert findings[0].message.startswith("not observable: keys (2, 2, 6, 4): not 2 batch items of 6 rows each")
    assert findings[0].heads is None and findings[0].batch is None
    # placed, the same keys are a key_index error
    placed = analyse(replace(unplaced, unobservable={}), reference, weights_shared=True).findings
    assert ("key_index", "error") in [(f.code, f.severity) for f in placed]
