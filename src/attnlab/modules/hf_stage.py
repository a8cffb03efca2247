"""The stage of a hierarchical vision model (Swin's, PVT's, SegFormer's) an attention class is
built for: its width, heads, reduction ratio and window, where the model's own code passes them
from what attnlab does not build.

Such a model builds its attention once per stage, from loops and sub-modules above the layer
(Swin's `input_resolution` comes from its patch embeddings; PVT's `sr_ratios[i]` from the stage's
index). A constructor parameter the model's code leaves unknown is read from the config's
per-stage lists by its name, at the stage the run's tokens fit: the first whose reduction ratio
divides both sides of their grid (PVT's sr_ratios (8, 4, 2, 1) on a 2 x 4 grid: stage 2, ratio 2).
A window (`window_size`, LeViT's `resolution`) is the grid of the run's tokens, whatever the model computes: attnlab's
tokens are one window (Swin's relative position table is built for exactly the window's tokens);
but a forward that reads the grid itself (SAM's, `hf_grid`) keeps the model's window.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from typing import Any

from attnlab.errors import TokensNeeded
from attnlab.modules import hf_grid
from attnlab.modules.families import spellings

UNKNOWN = object()  # an argument the model computes from what attnlab does not build

_REDUCTION = ("sr_ratio", "sequence_reduction_ratio", "sequences_reduction_ratio", "spatial_reduction_ratio")
_REDUCTIONS = ("sr_ratios", "sequence_reduction_ratios")  # the config's per-stage ratios
_WINDOWS = ("window_size", "resolution")  # Swin's window, LeViT's resolution: the tokens' grid side(s)


def grid_of(cells: int) -> tuple[int, int]:
    """(height, width) of `cells` tokens: height the largest divisor up to sqrt(cells)."""
    height = max(d for d in range(1, math.isqrt(cells) + 1) if cells % d == 0)
    return height, cells // height


def sized_by_tokens(module_cls: type, attributes: dict[str, Any]) -> bool:
    """Its constructor takes a window (Swin's), or its config reduces keys per stage (PVT's): built
    for the run's token count."""
    names = _parameter_names(module_cls)
    return any(w in names for w in _WINDOWS) or any(a in attributes for a in _REDUCTIONS)


def staged(module_cls: type, config: Any, args: list[Any], kwargs: dict[str, Any],
           tokens: int | None) -> tuple[list[Any], dict[str, Any]]:
    """The model's arguments with each unknown size read from the config at the stage `tokens` fit,
    and the window the grid of `tokens`."""
    names = _parameter_names(module_cls)
    stage = stage_of(config, tokens)
    # a forward that reads the tokens' grid (SAM's) windows it itself: its window stays the model's
    tokens_window = tokens if hf_grid.axes(module_cls) is None else None
    args = [_filled(names[i] if i < len(names) else "", value, config, stage, tokens_window)
            for i, value in enumerate(args)]
    kwargs = {name: _filled(name, value, config, stage, tokens_window) for name, value in kwargs.items()}
    return args, kwargs


def _filled(name: str, value: Any, config: Any, stage: int, tokens: int | None) -> Any:
    if name in _WINDOWS and tokens:
        height, width = grid_of(tokens)  # the run's tokens are the window: a square one's side, else (H, W)
        return height if height == width else (height, width)
    if value is not UNKNOWN:
        return value
    key = "d_in" if name in spellings("d_in") else "num_heads" if name in spellings("num_heads") else None
    candidates = spellings(key, getattr(config, "model_type", "")) if key else _REDUCTIONS if name in _REDUCTION else ()
    found = next((getattr(config, c) for c in candidates if getattr(config, c, None) is not None), None)
    if found is None:
        return UNKNOWN
    return found[min(stage, len(found) - 1)] if isinstance(found, (list, tuple)) else found


def stage_of(config: Any, tokens: int | None) -> int:
    """The first stage whose reduction ratio divides both sides of the tokens' grid; 0 without ratios."""
    ratios = next((getattr(config, c) for c in _REDUCTIONS if isinstance(getattr(config, c, None), (list, tuple))), None)
    if not ratios or not tokens:
        return 0
    height, width = grid_of(tokens)
    return next((k for k, r in enumerate(ratios) if height % r == 0 and width % r == 0), len(ratios) - 1)


def _init(module_cls: type[object]) -> ast.FunctionDef | None:
    """Its `__init__` as source (transformers may wrap the class: its signature names nothing)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(module_cls.__init__)))
    except (TypeError, OSError, SyntaxError):
        return None
    init = tree.body[0] if tree.body else None
    return init if isinstance(init, ast.FunctionDef) else None


def _parameter_names(module_cls: type) -> list[str]:
    init = _init(module_cls)
    return [a.arg for a in [*init.args.args[1:], *init.args.kwonlyargs]] if init else []


def required_parameters(module_cls: type) -> list[str]:
    """Its `__init__`'s parameters without a default (SwinAttention's hidden_size, num_attention_heads, window_size)."""
    init = _init(module_cls)
    if init is None:
        return []
    positional = init.args.args[1:]
    required = positional[:len(positional) - len(init.args.defaults)]
    keyword = [a for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True) if d is None]
    return [a.arg for a in [*required, *keyword]]


def refused_window(module_cls: type, tokens: int | None, exc: Exception) -> TokensNeeded | None:
    """Why a window class refused the run's tokens as its window: it takes only a square one
    (SwinAttention's `(window_size, window_size)`) and they are no square; None: another failure."""
    names = _parameter_names(module_cls)
    if (not tokens or not any(w in names for w in _WINDOWS) or not isinstance(exc, TypeError)
            or hf_grid.axes(module_cls) is not None):
        return None
    height, width = grid_of(tokens)
    if height == width:
        return None
    side = math.isqrt(tokens) + 1
    return TokensNeeded(f"{module_cls.__name__} takes a square window and attnlab's tokens are one window: "
                        f"n_tokens={tokens} is no square number (e.g. inputs.n_tokens={side * side}, a {side} x {side} "
                        f"window)", side * side)
