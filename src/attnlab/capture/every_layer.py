"""Every attention layer of a model captured in one forward of the unchanged model.

One recorder watches the whole forward; a forward pre-hook on each watched module gives it a
recording of its own (its parameters, the hidden states it received), and its forward hook turns
that recording into the layer's Capture, as `capture` would have on the same call. Between the
watched modules the recorder passes every call through. What is done with each Capture (kept,
spilled, diagnosed) is the caller's: `captured(index, capture)` is told as soon as it is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import Token
from typing import Any

import torch
from torch import nn
from torch.overrides import _get_current_function_mode

from attnlab.capture import provenance
from attnlab.capture.fused_kernels import flex_attention_eager
from attnlab.capture.recorder import _ACTIVE, Capture, _Recorder, finished
from attnlab.modules.built import CallConvention

Captured = Callable[[int, Capture], None]
_UNPACK = CallConvention()  # the output among what the layer returned: (output, weights) or a tensor


def _hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """The hidden states of an attention call: the first positional argument, else the first 3-D tensor keyword."""
    if args:
        first: torch.Tensor = args[0]  # the hidden states, as the module's forward takes them
        return first
    return next(v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.dim() == 3)


@contextmanager
def every_layer(modules: Sequence[nn.Module], captured: Captured) -> Iterator[None]:
    """While inside, each call of `modules[i]` is captured and handed to `captured(i, capture)`."""
    recorder = _Recorder(None)
    open_calls: list[tuple[provenance.Recording, torch.Tensor, Token[provenance.Recording | None]]] = []

    def start(module: nn.Module) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        def pre(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden = _hidden(args, kwargs)
            recording = provenance.Recording(module, hidden)
            open_calls.append((recording, hidden, _ACTIVE.set(recording)))
            recorder.rec = recording
        return pre

    def finish(index: int, module: nn.Module) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any], Any], None]:
        def post(_module: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], out: Any) -> None:
            recording, hidden, token = open_calls.pop()
            _ACTIVE.reset(token)
            recorder.rec = open_calls[-1][0] if open_calls else None  # a watched module inside another
            if open_calls:  # inside another watched module: its recording sees what follows
                captured(index, finished(recording, module, hidden, _UNPACK.unpack(out, hidden)))
                return
            with _stepped_out(recorder):  # the caller's diagnosis is no part of the forward: its torch calls skip the mode
                captured(index, finished(recording, module, hidden, _UNPACK.unpack(out, hidden)))
        return post

    with ExitStack() as stack:
        for index, module in enumerate(modules):
            stack.callback(module.register_forward_pre_hook(start(module), with_kwargs=True).remove)
            stack.callback(module.register_forward_hook(finish(index, module), with_kwargs=True).remove)
        stack.enter_context(torch.no_grad())
        stack.enter_context(flex_attention_eager())
        stack.enter_context(recorder)
        yield


@contextmanager
def _stepped_out(recorder: _Recorder) -> Iterator[None]:
    """`recorder` off torch's mode stack while inside, back on after, where it is the innermost mode
    (as in a watched module's forward hook): a 12-layer forward's diagnoses made 40,000 calls through it."""
    if _get_current_function_mode() is not recorder:
        yield
        return
    recorder.__exit__(None, None, None)
    try:
        yield
    finally:
        recorder.__enter__()
