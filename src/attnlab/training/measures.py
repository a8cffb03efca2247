"""What is measured at init and at the end, on one fixed probe batch, outside the step loop:
the gradient norm reaching each projection, the attention entropy and largest weight per layer and
head (attnlab's stage capture reads the weights, whatever the class), and attnlab's diagnosis of
the first layer, variant against reference on the same input."""

from __future__ import annotations

import math
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


def saturation(weights: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per head: (the mean over rows of a row's largest weight, the mean row entropy as a fraction of
    the uniform's over the row's causal prefix); the first row, one key, says nothing and is left out."""
    weights = weights.float()[:, :, 1:]  # (B, H, Q - 1, K)
    visible = torch.arange(2, weights.shape[-1] + 1, dtype=torch.float32)  # (Q - 1,) keys a causal row sees
    largest = weights.amax(dim=-1).mean(dim=(0, 2))  # (H,)
    entropy = -(weights * weights.clamp_min(1e-12).log()).sum(dim=-1) / visible.log()  # (B, H, Q - 1)
    return largest.tolist(), entropy.mean(dim=(0, 2)).tolist()


def attention_shape(model: GPTModel, inputs: torch.Tensor) -> tuple[dict[str, float], dict[int, np.ndarray]]:
    """({"layer<i>/head<h>/max_weight" and ".../entropy"}, {layer: the first probe item's weights
    (H, T, T)}) from each layer's captured weights."""
    shape: dict[str, float] = {}
    first_item: dict[int, np.ndarray] = {}
    for layer, (attention, x) in enumerate(zip(model.attention_layers(), attention_inputs(model, inputs))):
        weights = capture(attention, x).stages.get("weights")
        if weights is None:  # a kernel whose weights cannot be read or rebuilt: nothing to say
            continue
        first_item[layer] = weights[0].float().cpu().numpy()  # (H, T, T)
        for head, (largest, entropy) in enumerate(zip(*saturation(weights))):
            shape[f"layer{layer}/head{head}/max_weight"] = largest
            shape[f"layer{layer}/head{head}/entropy"] = entropy
    return shape, first_item


def first_layer_diagnosis(variant: GPTModel, reference: GPTModel, inputs: torch.Tensor) -> dict[str, Any]:
    """attnlab's diagnosis of the variant's first attention layer against the reference's, both given
    the variant's own first-layer input: its findings and first divergent stage."""
    x = attention_inputs(variant, inputs)[0]  # (B, T, d_model)
    result = diagnosed(capture(variant.attention_layers()[0], x), capture(reference.attention_layers()[0], x),
                       shared=True, train=False, expect={})
    return {"first_divergent_stage": result.first_divergent_stage,
            "findings": [{"code": f.code, "stage": f.stage, "message": f.message} for f in result.findings]}


def measure(model: GPTModel, batch: Batch, reference: GPTModel | None = None) -> dict[str, Any]:
    """The checkpoint's measures of `model`; with `reference`, the first layer's diagnosis too.
    Under PROBE_WEIGHTS the arrays the heatmaps draw, left out of training.json."""
    was_training = model.training
    model.eval()
    shape, weights = attention_shape(model, batch.inputs)
    measured: dict[str, Any] = {"grad_norm": gradient_norms(model, batch), "attention": shape, PROBE_WEIGHTS: weights}
    if reference is not None:
        measured["diagnosis"] = first_layer_diagnosis(model, reference, batch.inputs)
    model.train(was_training)
    return measured
