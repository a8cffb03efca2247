"""The variant a Hugging Face model's layer runs when the run names none.

The book's MultiHeadAttention holding the layer's parameters stands in for the layer only where it
computes what the layer computes (GPT-2, OPT, BERT): there its differences are the model's. Where it
does not (RoPE, QK-norm, soft caps, grouped or fused keys and values, a mixture of experts, a layout
the book's projections cannot hold), the book's missing rotary would be blamed on the model as a
`query_source` error: a copy of the layer's own module (its class, constructor arguments and
state_dict) is re-run through attnlab instead, captured and diagnosed as any variant, `own:CLASS` in
the record: a correct copy changes the model's output by float rounding only (KL < 1e-6).
"""

from __future__ import annotations

import torch

from attnlab.model.config_variants import own_name
from attnlab.model.forward import AsLayerCalled
from attnlab.model.layer import ModelRun, model_variant
from attnlab.model.variant_fit import DEFAULT, variant_for_layer
from attnlab.modules.built import BuiltModule

SAME_OUTPUT = 1e-5  # the book's class stands in for the layer within this, relative to the output's scale


def default_variant(run: ModelRun, layer: int, requested: str, seed: int) -> str:
    """`requested` as a model's layer runs it (attnlab.model.variant_fit); with none requested in a
    Hugging Face model, the layer's own class where the book's does not reproduce its output."""
    book = variant_for_layer(requested, run.sizes.heads)
    if requested != DEFAULT or not run.loaded.hf:
        return book
    return book if _reproduces(run, layer, book, seed) else own_name(run.attention[layer][1])


def _reproduces(run: ModelRun, layer: int, name: str, seed: int) -> bool:
    """The book's class built for the layer, holding its parameters, gives the layer's output on the
    layer's own input; False where it cannot even hold them."""
    call, own = run.calls[layer], run.attention[layer][1]
    try:
        built, _ = model_variant(run, layer, name, {}, seed)
        with torch.no_grad():
            expected = BuiltModule(own, AsLayerCalled(call)).call(call.hidden).output  # (B, T, d)
            got = built.call(call.hidden).output  # (B, T, d)
    except Exception:  # noqa: BLE001 - a layout the book's projections cannot hold, or a forward that fails: not the book's
        return False
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor) or got.shape != expected.shape:
        return False
    gap = float((got - expected).abs().max())
    return gap <= SAME_OUTPUT * max(float(expected.abs().max()), 1.0)
