"""What a module costs: forward time, forward+backward time, peak memory and FLOPs.

Measured on the plain module after the capture, never under it: the capture's TorchFunctionMode
sees every call and would be timed too, and a profile must never change the diagnosed values.
Nothing here runs unless `profile=true`.

- Time: after one warm-up call (none after the pipeline's capture, which has just run the module
  on the same input: lazy initialisation and the allocator's pages are done; a module that
  compiles itself on its first plain call would pay that in its first timed call) and one call that
  measures the peak and counts the FLOPs, calls timed one by one (perf_counter, the device synchronised
  before and after) until the budget is spent, at least one: the median and interquartile range
  over them (nan below 4 calls). torch.utils.benchmark's blocked_autorange first spends a call on
  sizing its blocks, which at the notebook's size is a whole forward outside the budget. The
  forward runs under no_grad (inference). `backward_ms` is one forward plus backward of the
  output's sum (with `profile_backward=true`), nan where the kernel has no backward on the device
  (FlexAttention on the CPU).
- Peak memory of one forward above what was allocated before it: CUDA's
  `max_memory_allocated`; on a Linux CPU the process's resident high-water mark (VmHWM), reset
  through /proc/self/clear_refs after returning freed memory to the system (malloc_trim), so it
  is measured, not estimated; nan where neither exists (macOS CPU, MPS).
- FLOPs: 2 x the multiply-adds of every matmul the forward runs (a TorchFunctionMode reading the
  operands' shapes), dense: a causal mask does not halve them, and the softmax is not counted. An
  attention kernel (scaled_dot_product_attention, FlexAttention) counts as its two dense products
  whichever kernel the device picks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from attnlab.capture.fused_kernels import flex_attention_eager
from attnlab.capture.torch_calls import op_name
from attnlab.modules.built import BuiltModule, as_built

NAN = float("nan")
_CPU = torch.device("cpu")
RATIOS = {"forward_ms_vs_reference": "forward_ms", "peak_bytes_vs_reference": "peak_bytes"}
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def profile_module(module: nn.Module | BuiltModule, x: torch.Tensor, *, budget_s: float, backward: bool,
                   warmed_up: bool = False) -> dict[str, float]:
    """forward_ms, forward_ms_iqr, backward_ms, peak_bytes and flops of `module(x)` in about
    `budget_s`: the untimed calls (warm-up, peak, FLOPs) are paid from it too, and every timer
    still takes one call. `warmed_up`: the module has just run on `x` (the pipeline's capture):
    no warm-up call."""
    share = budget_s / (2 if backward else 1)
    deadline = time.perf_counter() + share
    with torch.no_grad():
        forward = _call(module, x)
        if not warmed_up:
            forward()  # warm-up: lazy initialisation, a compiled kernel, the allocator's first pages
        peaks: list[float] = []  # one call measures both: the FLOP counter allocates no tensors
        flops = count_flops(forward, run=lambda counted: peaks.append(peak_bytes(counted, x.device)))
        peak = peaks[0] if peaks and not math.isnan(flops) else peak_bytes(forward, x.device)
        median, iqr = time_call(forward, deadline - time.perf_counter(), x.device)
    return {"forward_ms": median, "forward_ms_iqr": iqr,
            "backward_ms": time_backward(module, x, share) if backward else NAN,
            "peak_bytes": peak, "flops": flops}


def profile_pair(variant: tuple[BuiltModule, torch.Tensor], reference: tuple[BuiltModule, torch.Tensor], *,
                 budget_s: float, backward: bool, warmed_up: bool = False) -> dict[str, float]:
    """The variant's columns and their ratios to the reference's, both measured in this job: half
    the budget each. `warmed_up`: both have just run on their inputs."""
    mine = profile_module(*variant, budget_s=budget_s / 2, backward=backward, warmed_up=warmed_up)
    theirs = profile_module(*reference, budget_s=budget_s / 2, backward=backward, warmed_up=warmed_up)
    ratios = {name: _ratio(mine[column], theirs[column]) for name, column in RATIOS.items()}
    return {**mine, **ratios}


def time_call(fn: Callable[[], Any], seconds: float, device: torch.device = _CPU) -> tuple[float, float]:
    """Median and interquartile range of one call, in ms, over the calls that fit in `seconds`
    (at least one)."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while not times or time.perf_counter() + times[-1] <= deadline:  # a call that would end past it is not started
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    low, median, high = np.percentile(times, [25, 50, 75])  # numpy: a book-size budget holds ~10^4 calls
    return float(median) * 1e3, float(high - low) * 1e3 if len(times) >= 4 else NAN


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_backward(module: nn.Module | BuiltModule, x: torch.Tensor, seconds: float) -> float:
    """Median ms of one forward and backward (gradients of the output's sum, not accumulated);
    nan where the module has no backward on this device."""
    inputs = [x.detach().requires_grad_(x.is_floating_point())] if x.is_floating_point() else []
    leaves = [*inputs, *(p for p in as_built(module).module.parameters() if p.requires_grad)]
    if not leaves:
        return NAN
    forward = _call(module, inputs[0] if inputs else x)

    def step() -> None:
        torch.autograd.grad(forward().float().sum(), leaves, allow_unused=True)

    try:
        with torch.enable_grad():
            step()
            return time_call(step, seconds, x.device)[0]
    except (NotImplementedError, RuntimeError):  # e.g. "FlexAttention does not support backward on CPU"
        return NAN


def count_flops(fn: Callable[[], Any], run: Callable[[Callable[[], Any]], Any] = lambda counted: counted()) -> float:
    """2 x the multiply-adds of every matmul of one call (dense); nan where the counter cannot run.
    `run(counted)` makes that one call (peak_bytes measures it in the same forward)."""
    counter = _MatmulFlops()

    def counted() -> Any:
        with flex_attention_eager(), counter:
            return fn()

    try:
        run(counted)
    except Exception:  # noqa: BLE001 - a kernel the counter cannot follow is no count, not a failed run
        return NAN
    return float(counter.flops)


class _MatmulFlops(TorchFunctionMode):
    """Counts each product where the module calls it, from its operands' shapes: 2 x the output's
    elements x the length of the contraction. torch.utils.flop_counter counts at the dispatcher
    instead, but its first use in a process takes about a second, more than a book-size profile
    may add, and it misses the CPU's fused attention kernels. A kernel is counted as a whole (the
    mode does not see the calls inside it): an attention kernel as its two dense products,
    2 * b * h * n_q * n_k * (d_k + d_v), a mask or not; nn.MultiheadAttention's as its four
    projections and those two products."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.flops += _product_flops(op_name(func), args, out)
        return out


_MATMULS = {"matmul", "__matmul__", "mm", "bmm", "linear", "addmm", "baddbmm", "__rmatmul__", "einsum"}
_ATTENTION = {"scaled_dot_product_attention", "flex_attention"}
_NN_MHA = {"multi_head_attention_forward", "_native_multi_head_attention"}


def _product_flops(name: str, args: tuple[Any, ...], out: Any) -> int:
    # int(): the operands are untyped here, their sizes ints
    if name in _MATMULS and isinstance(out, torch.Tensor):
        if name == "einsum":
            operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (tuple, list)) else list(args[1:])
            inputs, _, output = str(args[0]).replace(" ", "").partition("->")
            sizes = {c: n for letters, t in zip(inputs.split(","), operands) for c, n in zip(letters, t.shape)}
            return int(2 * out.numel() * math.prod(n for c, n in sizes.items() if c not in output))
        first = {"addmm": 1, "baddbmm": 1, "__rmatmul__": 1}.get(name, 0)  # the operand whose last dim is contracted
        return int(2 * out.numel() * args[first].shape[-1])
    if name in _ATTENTION and len(args) >= 3:
        q, k, v = args[:3]
        return int(2 * math.prod(q.shape[:-2]) * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1]))
    if name in _NN_MHA and len(args) >= 4:
        q, k = args[0], args[1]
        batch_first = name == "_native_multi_head_attention"  # the other gets (tokens, batch, embed)
        n_q, n_k = (q.shape[-2], k.shape[-2]) if batch_first else (q.shape[0], k.shape[0])
        batch = (q.shape[0] if batch_first else q.shape[1]) if q.dim() == 3 else 1
        embed = int(args[3])
        return int(2 * batch * (n_q * embed * embed * 2 + n_k * embed * embed * 2 + n_q * n_k * 2 * embed))
    return 0


def peak_bytes(fn: Callable[[], Any], device: torch.device) -> float:
    """Bytes one call allocates at its peak above what was allocated before it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before)
    if device.type != "cpu" or not _can_reset_high_water_mark():
        return NAN
    _release_free_memory()
    try:
        _CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident size
    except OSError:  # a sandbox that forbids it: no measurement rather than a stale mark
        return NAN
    before = _status_bytes("VmRSS")
    fn()
    return float(max(0, _status_bytes("VmHWM") - before))


def _call(module: nn.Module | BuiltModule, x: torch.Tensor) -> Callable[[], Any]:
    built = as_built(module)

    def forward() -> Any:
        return built.call(x).output

    return forward


def _ratio(mine: float, theirs: float) -> float:
    return mine / theirs if theirs > 0 and math.isfinite(theirs) and math.isfinite(mine) else NAN


def _can_reset_high_water_mark() -> bool:
    try:
        return _STATUS.exists() and _CLEAR_REFS.exists() and "VmHWM" in _STATUS.read_text()
    except OSError:
        return False


def _status_bytes(key: str) -> int:
    found = re.search(rf"^{key}:\s+(\d+) kB", _STATUS.read_text(), flags=re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def _release_free_memory() -> None:
    """Hand memory glibc keeps after frees back to the system, so a forward that reuses it still
    raises the high-water mark above the resident size measured before it."""
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc: the mark may then read low
        pass
