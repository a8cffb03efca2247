"""A job inside a model: its request checked before anything loads, the model loaded once, then one
record per compared layer (attnlab.model.model_run), or per edited layer (attnlab.model.intervention_records)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from torch import nn

from attnlab.errors import UserError
from attnlab.model.declared_config import Declared, read_declared
from attnlab.model.edit_checks import check_request_inputs
from attnlab.model.intervention_records import intervention_records
from attnlab.model.layer_check import compute_check_records
from attnlab.model.loading import load_models
from attnlab.model.model_run import Done, layer_records, model_run, tokens_label
from attnlab.model.request import ModelRequest
from attnlab.model.variant_fit import check_variant_fits
from attnlab.record import Record


def check_model_request(request: ModelRequest) -> Declared:
    """What can be checked without loading anything, after the app has read the request
    (attnlab.app.job_settings.model_request: the model, the edit, the reference model); returns what
    the model's config declares, read once here and handed to the load."""
    declared = read_declared(request.model)
    if request.edit is None and request.reference_model is None:
        check_variant_fits(request.variant, declared.heads)
    check_request_inputs(request, declared)
    if request.n_seeds != 1:
        raise UserError(f"n_seeds={request.n_seeds}: a model's weights are its own; a run inside a model takes one seed")
    return declared


def compute_model_records(request: ModelRequest, phase: Callable[[str], None] | None = None,
                          done: Done | None = None) -> list[Record]:
    """One record per compared layer (`layer=N`, a list, or `all`); `done(record, index, n)` is called
    with each as soon as it is made (the job writes it and keeps it with most of its stages let go).
    The request flows one way: checked (what the config declares), loaded once, then run."""
    say = phase or (lambda _name: None)
    done = done or (lambda record, _index, _n: record)
    declared = check_model_request(request)
    say("model" if request.reference_model is None else "models")
    loaded, reference = load_models(request, declared.config)
    with evaluating(loaded.module, *([reference.module] if reference else [])):
        if reference is not None:
            return compute_check_records(request, loaded, reference, say, done)
        if request.edit is not None:
            return intervention_records(request, request.edit, loaded, partial(model_run, request, loaded),
                                        tokens_label(loaded), say, done)
        return layer_records(request, loaded, say, done)


@contextmanager
def evaluating(*modules: nn.Module) -> Iterator[None]:
    """Each of `modules` in eval mode while the job runs, each submodule's own mode put back after,
    whatever happened: an in-memory model is the user's own object, run without a copy (its layers
    are swapped in place and put back by attnlab.model.forward.replaced)."""
    modes = [(each, each.training) for module in modules for each in module.modules()]
    for module in modules:
        module.eval()
    try:
        yield
    finally:
        for each, training in modes:
            each.training = training
