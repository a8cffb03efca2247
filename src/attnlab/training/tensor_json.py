"""Python values with tensors in them as JSON plus a flat {name: tensor} map for safetensors, and
back, exactly: a checkpoint's state (optimizer state dicts, random states, results holding NumPy
arrays) is never pickled. Tuples, dicts with int keys, torch tensors and NumPy arrays are tagged
so that they come back as what they were; floats keep every bit (JSON's repr round-trips them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

TAG = "__attnlab__"


def encoded(value: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """(a JSON value, the tensors it refers to by name)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            name = f"t{len(tensors)}"
            tensors[name] = item.detach().cpu().contiguous().clone()  # a copy: safetensors refuses shared storage
            return {TAG: "tensor", "name": name}
        if isinstance(item, np.ndarray):
            name = f"t{len(tensors)}"
            # safetensors has no uint32 for torch (NumPy's random state): kept as int64, its dtype named
            stored = item.astype(np.int64) if item.dtype == np.uint32 else item
            tensors[name] = torch.from_numpy(np.ascontiguousarray(stored)).clone()
            return {TAG: "array", "name": name, "dtype": item.dtype.str}
        if isinstance(item, tuple):
            return {TAG: "tuple", "items": [walk(v) for v in item]}
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, dict):
            if all(isinstance(k, str) for k in item) and TAG not in item:
                return {k: walk(v) for k, v in item.items()}
            return {TAG: "dict", "items": [[walk(k), walk(v)] for k, v in item.items()]}
        if isinstance(item, (np.floating, np.integer)):
            return item.item()
        return item

    return walk(value), tensors


def decoded(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """What `encoded` was given."""
    if isinstance(value, list):
        return [decoded(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    if kind == "tensor":
        return tensors[value["name"]]
    if kind == "array":
        return tensors[value["name"]].numpy().astype(np.dtype(value["dtype"]))
    if kind == "tuple":
        return tuple(decoded(v, tensors) for v in value["items"])
    if kind == "dict":
        return {decoded(k, tensors): decoded(v, tensors) for k, v in value["items"]}
    return {k: decoded(v, tensors) for k, v in value.items()}
