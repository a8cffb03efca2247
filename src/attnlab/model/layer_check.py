"""The learner's check: a model of one's own (the source's GPTModel with GPT-2's weights loaded)
against `reference_model=` (Hugging Face's GPT-2 with the same weights), layer by layer.

Each layer L of both models runs on the reference model's input to layer L, so that one layer's
mistake does not make every later layer diverge; the end-to-end effect (both models whole, each
with its own output head) is reported separately, in every layer's record.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from attnlab.compute.pipeline import diagnosed, run_module
from attnlab.errors import UserError
from attnlab.model.effect import output_effect
from attnlab.model.forward import AsLayerCalled, output_head
from attnlab.model.layer import ModelRun, layer_reference, own_head_patterns
from attnlab.model.loading import LoadedModel
from attnlab.model.loading_checks import loading_findings
from attnlab.model.locate import attention_modules, chosen_layers
from attnlab.model.model_memory import check_model_fits
from attnlab.model.request import ModelRequest
from attnlab.model.sizes import model_sizes
from attnlab.model.tokens import token_ids
from attnlab.modules.built import BuiltModule, PluginError
from attnlab.modules.layouts import LayoutError, read_projections
from attnlab.record import ModelInfo, Pair, Record, Setup, record_of


def compute_check_records(request: ModelRequest, learner: LoadedModel, reference: LoadedModel,
                          phase: Callable[[str], None], done: Callable[[Record, int, int], Record]) -> list[Record]:
    """One record per layer: the learner's layer L against the reference model's, on its input."""
    learner_spec = request.model
    reference_spec = request.reference_model
    assert reference_spec is not None  # the learner's check (attnlab.model.model_job)
    reference_attention = attention_modules(reference.module, reference_spec.attention_path, "reference_model")
    attention = attention_modules(learner.module, learner_spec.attention_path, learner_spec.key)
    n_layers = len(reference_attention)
    if len(attention) != n_layers:
        raise UserError(f"{learner_spec.key}: {len(attention)} attention layers, the reference model has {n_layers}")
    layers = chosen_layers("all" if request.layer is None else request.layer, n_layers)
    sizes = model_sizes(reference.config, reference.label, reference_attention[0][1])
    learner_sizes = model_sizes(learner.config, learner.label, attention[0][1])
    longest = sizes.context or request.inputs.max_tokens
    assert longest is not None  # inputs=text and inputs=ids declare max_tokens (model_job checked the kind: check_text)
    ids = token_ids(reference.tokenizer, request.inputs.text, sizes.vocab, longest)
    labels = reference.tokenizer.labels(ids)
    check_model_fits(learner.n_parameters + reference.n_parameters, sizes, len(ids), 2 * len(layers))
    reference_run = ModelRun.start(reference, reference_attention, sizes, ids, labels, layers)
    learner_run = ModelRun.start(learner, attention, learner_sizes, ids, labels, layers)
    end_to_end = output_effect(output_head(reference.module), reference_run.base, learner_run.base, reference_run.ids,
                               scaling=sizes.logits, changed_head=output_head(learner.module))
    records: list[Record] = []
    for layer in layers:
        phase(f"layer {layer}")
        about = ModelInfo(model=learner.label, n_layers=n_layers, parameters=learner.n_parameters,
                          tokenizer=reference.tokenizer.name, heads=sizes.heads, kv_heads=sizes.kv_heads, layer=layer,
                          attention=learner_run.attention[layer][0], reference_model=reference.label,
                          reference_attention=reference_run.attention[layer][0], end_to_end=end_to_end)
        setup = Setup(variant=learner.label, seed=request.seed, config=copy.deepcopy(request.config), labels=labels,
                      n_tokens=len(ids), d_in=sizes.width, d_out=sizes.width, model=about)
        records.append(done(check_layer(learner_run, reference_run, layer, setup, request), len(records), len(layers)))
    return records


def check_layer(learner: ModelRun, reference: ModelRun, layer: int, setup: Setup, request: ModelRequest) -> Record:
    """The learner's layer and the reference's, both on the reference's input to the layer."""
    module = learner.attention[layer][1]
    hidden = reference.calls[layer].hidden  # (1, T, d)
    pair = Pair()
    try:
        reference_label, reference_capture = layer_reference(reference, layer, "auto", request.seed)
        pair = Pair(reference=reference_label)
        variant = run_module(BuiltModule(module, AsLayerCalled(learner.calls[layer])), hidden, request.seed)
        mistakes = loading_findings(read_projections(module, num_heads=learner.sizes.heads,
                                                     num_kv_heads=learner.sizes.kv_heads),
                                    reference.projections(layer))
    except (PluginError, LayoutError) as exc:
        return record_of(setup, pair, error=str(exc))
    diagnosis = diagnosed(variant, reference_capture, shared=True, train=False, expect=request.expect, before=mistakes,
                          after=own_head_patterns(reference_capture))
    return record_of(setup, pair, diagnosis)  # the end-to-end effect, in every layer's diagnostics
