"""What the tests of transformers' own attention classes share: the survey's sizes, a run's error
findings, the check that a library class runs with none (and names what it declares), and the
check that attnlab's module, fed its model's call, returns what the same layer returns in the model."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import attnlab

SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4"]


def errors(result: Any) -> list[tuple[str, str]]:
    """The run's error findings as (code, stage); the run itself must have succeeded."""
    assert result.record.status == "ok", result.record.error
    return [(f.code, f.stage) for f in result.findings if f.severity == "error"]


def assert_runs_clean(model: str, declared: tuple[str, str] | None) -> None:
    """`variant=hf:MODEL` at the survey's sizes: no error finding, and `declared` among its findings."""
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    if declared:
        assert declared in {(f.code, f.stage) for f in result.findings}, [f.message for f in result.findings]


def assert_equals_its_layer_in(model: torch.nn.Module, module: torch.nn.Module,
                               run: Callable[[torch.nn.Module], Any]) -> torch.Tensor:
    """The model's layer of `module`'s class given `module`'s weights; `run(model)` (the model's own
    forward) records that layer's input and output, and attnlab's `module`, fed that input through its
    Hugging Face call, returns the same output. Returns the recorded input."""
    from attnlab.modules.built import HUGGING_FACE_CALL

    layer = next(m for m in model.modules() if type(m) is type(module))
    layer.load_state_dict(module.state_dict())
    seen: dict[str, torch.Tensor] = {}

    def hook(_m: torch.nn.Module, args: tuple, kwargs: dict, out: tuple) -> None:
        seen["hidden"], seen["output"] = (args[0] if args else kwargs["hidden_states"]), out[0]

    layer.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        run(model)
        got = HUGGING_FACE_CALL.call(module, seen["hidden"]).output  # (b, num_tokens, d_out)
    torch.testing.assert_close(got, seen["output"], rtol=1e-5, atol=1e-6)
    return seen["hidden"]


@contextmanager
def softmax_over_queries() -> Iterator[None]:
    """A planted mistake for library classes that call `nn.functional.softmax`: within the block, every
    softmax normalises over the queries (dim -2) instead of the keys."""
    original = torch.nn.functional.softmax
    torch.nn.functional.softmax = lambda t, dim=None, **kw: original(t, -2, **kw)
    try:
        yield
    finally:
        torch.nn.functional.softmax = original
