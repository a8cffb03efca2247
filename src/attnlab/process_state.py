"""What a plugin can change for everything after it in the same process, and torch's own functions.

torch's public functions (`torch.*`, `torch.nn.functional.*`, `torch.Tensor.*`) are noted when this
module is first imported, which attnlab.modules.discovery does before it imports any plugin. A plugin
that replaces one (`torch.softmax = my_softmax` at import, or inside its forward) made the reference
compute with it too, and report no findings; `own_torch()` puts torch's own back for the reference
and the diagnosis. `process_state()` is what a sweep's job worker compares before and after a job:
a job that changed it (the working folder, the umask, autocast, a replaced function) retires its
worker, so the next job starts in a process as attnlab made it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

OWNERS = {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor}


def _public(owner: Any) -> dict[str, Any]:
    names = [n for n in dir(owner) if not n.startswith("_") or (n.startswith("__") and n.endswith("__"))]
    found = {}
    for name in names:
        try:
            value = getattr(owner, name)
        except Exception:  # noqa: BLE001 - a lazy attribute that cannot load here is not one a plugin replaced
            continue
        if callable(value) and not isinstance(value, type):
            found[name] = value
    return found


ORIGINALS = {label: _public(owner) for label, owner in OWNERS.items()}


TORCH_FILES = os.path.dirname(torch.__file__) + os.sep


def replaced() -> list[str]:
    """torch's functions that are not torch's own any more, as `torch.softmax`."""
    found = []
    for label, owner in OWNERS.items():
        for name, original in ORIGINALS[label].items():
            current = getattr(owner, name, original)
            # a classmethod is bound anew at each look
            if current is not original and current != original and not _torchs_own_wrapper(current, original):
                found.append(f"{label}.{name}")
    return found


def _torchs_own_wrapper(current: Any, original: Any) -> bool:
    """Whether `current` is torch's own wrapper of `original`: torch._dynamo, when first imported
    (by torch.optim's first optimizer, say), wraps torch.manual_seed; that is no plugin's change."""
    code = getattr(current, "__code__", None)
    return getattr(current, "__wrapped__", None) is original and code is not None and code.co_filename.startswith(TORCH_FILES)


@contextmanager
def own_torch() -> Iterator[list[str]]:
    """torch's own functions for the duration, a plugin's replacements put back after; yields the
    names that were replaced."""
    names = replaced()
    kept = []
    for full in names:
        label, name = full.rsplit(".", 1)
        owner = OWNERS[label]
        kept.append((owner, name, getattr(owner, name)))
        setattr(owner, name, ORIGINALS[label][name])
    try:
        yield names
    finally:
        for owner, name, replacement in kept:
            setattr(owner, name, replacement)


def process_state() -> dict[str, Any]:
    """What a job may leave changed for the next one in its process (see the module's docstring)."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working folder was removed under the job
        cwd = None
    return {"working folder": cwd, "umask": current_umask(), "autocast": _autocast(), "replaced torch functions": replaced(),
            "default device": str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "cpu"}


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (another thread may be
    creating a file), else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _autocast() -> tuple[tuple[str, bool], ...]:
    found = []
    for device in ("cpu", "cuda"):
        try:
            found.append((device, torch.is_autocast_enabled(device)))
        except (TypeError, RuntimeError):  # an older torch takes no device (its flag is CUDA's)
            found.append((device, torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()))
    return tuple(found)


__all__ = ["ORIGINALS", "current_umask", "own_torch", "process_state", "replaced"]
