"""A job inside a model: its request checked before anything loads, the model loaded once, then one
record per compared layer (attnlab.model.model_run), or per edited layer (attnlab.model.intervention_records)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from attnlab.errors import UserError
from attnlab.model.declared_config import declared_config
from attnlab.model.edit_checks import check_batch_lengths, check_indices, check_patch_text, check_text
from attnlab.model.intervention_records import intervention_records
from attnlab.model.layer_check import compute_check_records
from attnlab.model.loading import evaluating, load_model
from attnlab.model.model_run import Done, layer_records, model_run, tokens_label
from attnlab.model.request import ModelRequest
from attnlab.model.variant_fit import check_variant_fits
from attnlab.modules.families import family
from attnlab.record import Record


def check_model_request(request: ModelRequest) -> None:
    """What can be checked without loading anything, after the app has read the request
    (attnlab.app.job_settings.model_request: the model, the edit, the reference model)."""
    spec, edit = request.model, request.edit
    if edit is None and request.reference_model is None:
        check_variant_fits(request.variant, spec)
    declared = declared_config(spec)
    model_type = (declared or {}).get("model_type")  # None: known once built
    check_indices(request.layer, declared, edit, seq2seq=_seq2seq(declared))
    check_patch_text(request.inputs, spec, edit)
    check_batch_lengths(request.inputs, spec, edit)
    if request.reference_model is not None or (model_type is not None and family(model_type).task != "image"):
        check_text(request.inputs)  # a language model's text, before it loads
    if request.n_seeds != 1:
        raise UserError(f"n_seeds={request.n_seeds}: a model's weights are its own; a run inside a model takes one seed")


def _seq2seq(declared: dict[str, Any] | None) -> bool:
    """An encoder–decoder's config (its layers named by stack in `layer=`)."""
    return bool(declared and declared.get("is_encoder_decoder"))


def compute_model_records(request: ModelRequest, phase: Callable[[str], None] | None = None,
                          done: Done | None = None) -> list[Record]:
    """One record per compared layer (`layer=N`, a list, or `all`); `done(record, index, n)` is called
    with each as soon as it is made (the job writes it and keeps it with most of its stages let go)."""
    say = phase or (lambda _name: None)
    done = done or (lambda record, _index, _n: record)
    check_model_request(request)
    if request.reference_model is not None:
        return compute_check_records(request, request.reference_model, say, done)
    say("model")
    loaded = load_model(request.model, request.seed)
    with evaluating(loaded.module):
        if request.edit is not None:
            return intervention_records(request, request.edit, loaded, partial(model_run, request, loaded),
                                        tokens_label(loaded), say, done)
        return layer_records(request, loaded, say, done)


