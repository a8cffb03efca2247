"""What is measured at init and at the end, on one fixed probe batch, outside the step loop:
the gradient norm reaching each projection, the attention entropy and largest weight per layer and
head (attnlab's stage capture reads the weights, whatever the class), and attnlab's diagnosis of
the first layer, variant against reference on the same input."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.capture.recorder import capture
from attnlab.compute.pipeline import diagnosed
from attnlab.modules.roles import module_roles
from attnlab.training.gpt import GPTModel
from attnlab.training.tasks import Batch

PROBE_WEIGHTS = "probe_weights"
NOT_MEASURED = "not_measured"  # {measure: why it does not apply to this variant}


def gradient_norms(model: GPTModel, batch: Batch) -> dict[str, float]:
    """{"layer<i>/<role>": the norm of the loss's gradient on that projection's parameters}."""
    model.zero_grad(set_to_none=True)
    logits = model(batch.inputs)  # (B, T, vocab)
    F.cross_entropy(logits[batch.scored], batch.targets[batch.scored]).backward()
    norms: dict[str, float] = {}
    for layer, attention in enumerate(model.attention_layers()):
        squares: dict[str, float] = {}
        for name, parameter in attention.named_parameters():
            role = module_roles(attention).get(name)
            if role is not None and parameter.grad is not None:
                squares[role] = squares.get(role, 0.0) + parameter.grad.pow(2).sum().item()
        norms |= {f"layer{layer}/{role}": math.sqrt(total) for role, total in squares.items()}
    model.zero_grad(set_to_none=True)
    return norms


def attention_inputs(model: GPTModel, inputs: torch.Tensor) -> list[torch.Tensor]:
    """What each attention layer is given on `inputs` (its block's normed states)."""
    seen: list[torch.Tensor] = []
    hooks = [attention.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
             for attention in model.attention_layers()]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


ROW_SUM_TOLERANCE = 1e-3  # a causal row of a softmax sums to 1 within float error; sigmoid attention's do not


def unmeasurable(weights: torch.Tensor) -> str | None:
    """Why the largest weight and the entropy do not apply to captured `weights` (B, H, Q, K), or None.
    Both read each row as a distribution over the keys the query sees: an extra column (an extra logit
    such as softmax-off-by-one's, dropped after the softmax) or rows that do not sum to 1 (sigmoid
    attention, a softmax over the queries) make them say nothing."""
    queries, keys = weights.shape[-2:]
    if keys != queries:
        return (f"the captured softmax has {keys} columns for {queries} tokens (an extra logit dropped after "
                f"the softmax?): its rows are not the weights the values get")
    sums = weights.float().sum(dim=-1)  # (B, H, Q)
    if not torch.allclose(sums, torch.ones_like(sums), atol=ROW_SUM_TOLERANCE):
        return (f"its rows are not distributions (they sum to {sums.min().item():.3g} to {sums.max().item():.3g}, "
                f"not 1): no softmax over the keys")
    return None


def saturation(weights: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per head: (the mean over rows of a row's largest weight, the mean row entropy as a fraction of
    the uniform's over the row's causal prefix); the first row, one key, says nothing and is left out."""
    weights = weights.float()[:, :, 1:]  # (B, H, Q - 1, K)
    visible = torch.arange(2, weights.shape[-1] + 1, dtype=torch.float32)  # (Q - 1,) keys a causal row sees
    largest = weights.amax(dim=-1).mean(dim=(0, 2))  # (H,)
    entropy = -(weights * weights.clamp_min(1e-12).log()).sum(dim=-1) / visible.log()  # (B, H, Q - 1)
    return largest.tolist(), entropy.mean(dim=(0, 2)).tolist()


def attention_shape(model: GPTModel, inputs: torch.Tensor) -> tuple[dict[str, float], dict[int, np.ndarray], str | None]:
    """({"layer<i>/head<h>/max_weight" and ".../entropy"}, {layer: the first probe item's weights
    (H, T, T)}, why the first layer that could not be measured was not) from each layer's captured weights."""
    shape: dict[str, float] = {}
    first_item: dict[int, np.ndarray] = {}
    why = None
    for layer, (attention, x) in enumerate(zip(model.attention_layers(), attention_inputs(model, inputs))):
        weights = capture(attention, x).stages.get("weights")
        if weights is None:
            why = why or f"layer {layer}: no attention weights captured (a kernel whose weights cannot be read or rebuilt)"
            continue
        reason = unmeasurable(weights)
        if weights.shape[-1] == weights.shape[-2]:
            first_item[layer] = weights[0].float().cpu().numpy()  # (H, T, T)
        if reason is not None:
            why = why or f"layer {layer}: {reason}"
            continue
        for head, (largest, entropy) in enumerate(zip(*saturation(weights))):
            shape[f"layer{layer}/head{head}/max_weight"] = largest
            shape[f"layer{layer}/head{head}/entropy"] = entropy
    return shape, first_item, why


def first_layer_diagnosis(variant: GPTModel, reference: GPTModel, inputs: torch.Tensor) -> dict[str, Any]:
    """attnlab's diagnosis of the variant's first attention layer against the reference's, both given
    the variant's own first-layer input: its findings and first divergent stage."""
    x = attention_inputs(variant, inputs)[0]  # (B, T, d_model)
    result = diagnosed(capture(variant.attention_layers()[0], x), capture(reference.attention_layers()[0], x),
                       shared=True, train=False, expect={})
    return {"first_divergent_stage": result.first_divergent_stage,
            "findings": [{"code": f.code, "stage": f.stage, "message": f.message} for f in result.findings]}


def _taken(name: str, take: Callable[[], Any], not_measured: dict[str, str]) -> Any:
    """A measure's value, or None with why it was not taken: a measure that cannot be taken on a
    variant (whatever its class raises) is a line in the table, never the end of the run."""
    try:
        return take()
    except Exception as exc:  # noqa: BLE001 - a plugin's class may raise anything on a probe
        message = str(exc).splitlines()[0] if str(exc) else ""
        not_measured[name] = f"{type(exc).__name__}: {message}"[:200]
        return None


def measure(model: GPTModel, batch: Batch, reference: GPTModel | None = None) -> dict[str, Any]:
    """The checkpoint's measures of `model`; with `reference`, the first layer's diagnosis too.
    Under PROBE_WEIGHTS the arrays the heatmaps draw, left out of training.json; under NOT_MEASURED,
    {measure: why} for each measure that does not apply to the variant."""
    was_training = model.training
    model.eval()
    not_measured: dict[str, str] = {}
    shape, weights, why = _taken("attention", lambda: attention_shape(model, batch.inputs), not_measured) or ({}, {}, None)
    if why is not None:
        not_measured["attention"] = why
    norms = _taken("grad_norm", lambda: gradient_norms(model, batch), not_measured) or {}
    measured: dict[str, Any] = {"grad_norm": norms, "attention": shape, PROBE_WEIGHTS: weights,
                                NOT_MEASURED: not_measured}
    if reference is not None:
        diagnosis = _taken("diagnosis", lambda: first_layer_diagnosis(model, reference, batch.inputs), not_measured)
        if diagnosis is not None:
            measured["diagnosis"] = diagnosis
    model.train(was_training)
    return measured
