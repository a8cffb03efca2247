"""The model's own call of its attention, recorded: what a Hugging Face attention class is given
when attnlab's own inputs (`hf_call.forward_kwargs`, `hf_inputs`) do not fit its forward.

The small model that owns the class (transformers' own model class for the module's config, built
from that config, never downloaded) is run once on inputs made so that its attention sees the run's
tokens; a forward pre-hook on its first instance of the class records the (args, kwargs) the model
passes (the rotary cos/sin in whatever form, mrope and vision rotary, relative distances, masks,
bias tensors), stops the model there, and attnlab calls its own module with those inputs and its
own hidden states. So an input the model computes is the model's own and never guessed.

Tokens: a model of token ids or embeddings is given the run's (batch, tokens). Where the model
makes its tokens from something else (an image's patches, audio frames), the input's last axis is
resized until the attention sees the run's tokens; where no size does, the refusal names the
number of tokens the smallest input gives (`inputs.n_tokens=N`). A model that fails on its tokens
alone is tried again with what attnlab makes from their count (`hf_extras`: positions, a layout's
boxes). Whatever the model could not be run on (an input from outside the attention: another model's
hidden states, a decoder's encoder states) stays a one-line refusal naming the forward's input and
what to pass.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.errors import TokensNeeded, UserError
from attnlab.modules import hf_extras, hf_grid, hf_inputs, hf_small
from attnlab.modules.arguments import forward_parameters, providable, required
from attnlab.modules.families import spellings
from attnlab.modules.hf_lineage import missing_packages


class ModelCallError(RuntimeError):
    """A module whose model's call could not be recorded at the run's sizes: that record fails."""


class OutsideInput(UserError):
    """A forward input its model makes from what lies outside the attention (a drafter's context
    states, a decoder's encoder states), and the model could not be run without it: refused, as a bad
    variant is."""


class _Stop(Exception):
    """Raised by the pre-hook: the model's call is recorded, the rest of its forward is not needed."""


@dataclass
class Call:
    """The recorded call: its positional and keyword arguments, the hidden states among them."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    hidden: torch.Tensor
    turn: tuple[int, ...] | None = None  # the model's layout of x's axes, where not (b, T, d): hidden = x.permute(turn)
    grid: bool = False  # the model's hidden states are x's tokens on a grid, (b, H, W, d): hidden = x.reshape(...)

    def on(self, x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call with attnlab's hidden states in place of the model's, wherever the model passed them
        (CPM-Ant's hidden_q and hidden_kv are the one tensor), laid out as the model lays them out."""
        given = x.permute(self.turn) if self.turn is not None else x
        given = given.reshape(self.hidden.shape) if self.grid else given
        return (tuple(given if a is self.hidden else a for a in self.args),
                {k: given if v is self.hidden else v for k, v in self.kwargs.items()})

    def back(self, value: Any, x: torch.Tensor) -> Any:
        """The module's output in its model's layout (a tensor, or those of a tuple or mapping whose
        batch and token axes are where the call's hidden states had them) turned back to x's (b, T, ·)."""
        if self.grid:
            return hf_grid.read_back(value, x)
        if self.turn is None:
            return value
        inverse = tuple(self.turn.index(axis) for axis in range(len(self.turn)))
        kept = [self.turn.index(axis) for axis in range(x.dim() - 1)]  # where the model put x's (b, T)

        def turned(item: Any) -> Any:
            fits = isinstance(item, torch.Tensor) and item.dim() == x.dim() and \
                all(item.shape[at] == x.shape[axis] for axis, at in enumerate(kept))
            return item.permute(inverse) if fits else item

        if isinstance(value, tuple):
            return tuple(turned(v) for v in value)
        if isinstance(value, dict):
            return {k: turned(v) for k, v in value.items()}
        return turned(value)


_CALLS: weakref.WeakKeyDictionary[nn.Module, dict[tuple[Any, ...], Call]] = weakref.WeakKeyDictionary()
_MODELS: weakref.WeakKeyDictionary[nn.Module, list[tuple[nn.Module, nn.Module] | str]] = weakref.WeakKeyDictionary()
_FED: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()  # "own" or "recorded", once known
_TOO_FEW = "its attention sees"  # a model that ran, but not at the run's tokens
_NOT_INSTALLED = ", which is not installed"  # a model that needs an optional package
_TRIES = 6  # sizes of a model's input tried before refusing
_HALVINGS = 2  # of them, halvings of a first size the model refuses
_MODEL_CLASSES = 2  # of a modeling file's model classes for the config, the first ones tried


def fed(module: nn.Module, x: torch.Tensor, own: Callable[[], Any]) -> Any:
    """What the module returns on x: `own()` (attnlab's own inputs) while they fit; where they fail,
    the module on its model's recorded call, and from then on always so. Where the model's call
    cannot be recorded either, the one-line reason why (`ModelCallError`)."""
    way = _FED.get(module)
    if way == "own":
        return own()
    if way == "recorded":
        return _on_call(module, x)
    try:
        value = own()
    except Exception as exc:  # noqa: BLE001 - attnlab's inputs that do not fit fail in many ways: its model's call
        value = _on_call(module, x, exc)  # the module's own error, if it fails on its model's inputs
        _FED[module] = "recorded"
        return value
    _FED[module] = "own"
    return value


def recorded(module: nn.Module, x: torch.Tensor, own: Exception | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The module's (args, kwargs) as its model calls it, with x as the hidden states (`own`: how
    attnlab's own inputs failed, named in the refusal)."""
    return _call_for(module, x, own).on(x)


def _on_call(module: nn.Module, x: torch.Tensor, own: Exception | None = None) -> Any:
    """The module on its model's recorded call with x, its output in x's layout."""
    call = _call_for(module, x, own)
    args, kwargs = call.on(x)
    return call.back(module(*args, **kwargs), x)


def _call_for(module: nn.Module, x: torch.Tensor, own: Exception | None) -> Call:
    calls = _CALLS.setdefault(module, {})
    if tuple(x.shape) not in calls:
        # building a model draws nothing from the run's seed; a capture's torch-function mode sees none of its calls
        with torch.random.fork_rng(devices=[]), torch.no_grad(), torch._C.DisableTorchFunction():
            calls[tuple(x.shape)] = _record(module, x, own)
    return calls[tuple(x.shape)]


def recorded_mask_kind(module: nn.Module) -> str | None:
    """What the mask its model's recorded call passes hides, where the module is fed that call: nothing
    ("bidirectional": CPM-Ant's model counts every token as context) or exactly the future ("causal").
    Read off the model's call, never the class's forward, so a copy that drops its mask is still found.
    None: attnlab's own inputs, no mask tensor, or a mask of another shape (padding, a window)."""
    passed = _recorded_arguments(module)
    mask = next((v for k, v in passed.items() if "mask" in k and isinstance(v, torch.Tensor) and v.dim() >= 2), None)
    if mask is None:
        return None
    if not mask.is_floating_point():  # booleans or CPM-Ant's int 0/1: a keep-mask
        keep = mask != 0
    elif bool(((mask == 0) | (mask <= -1e4)).all()):  # additive: 0 kept, -inf hidden
        keep = mask == 0
    else:
        return None  # a 1/0 keep-mask of floats reads both ways: not guessed
    rows, cols = keep.shape[-2:]
    if bool(keep.all()):
        return "bidirectional"
    future = torch.ones(rows, cols, dtype=torch.bool, device=keep.device).tril(cols - rows)  # (rows, cols)
    return "causal" if bool((keep == future).all()) else None


def recorded_no_mask(module: nn.Module) -> bool:
    """Whether its model's recorded call passes None for every mask its forward names (XLNet's attn_mask_h
    and attn_mask_g, its bidirectional model's): its model hides nothing. Read off the model's call."""
    masks = [v for k, v in _recorded_arguments(module).items() if "mask" in k]
    return bool(masks) and all(v is None for v in masks)


def given_biases(module: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The score-shaped (..., T, T) tensors, with no hidden entry, that the module's recorded call hands it
    besides its mask (CPM-Ant's segment-relative position_bias): a term its model computes for the scores."""
    tokens, passed = x.shape[-2], _recorded_arguments(module, tuple(x.shape))
    return [v for k, v in passed.items() if "mask" not in k and isinstance(v, torch.Tensor) and v.is_floating_point()
            and v.dim() >= 2 and tuple(v.shape[-2:]) == (tokens, tokens) and bool(torch.isfinite(v).all())
            and bool((v > -1e4).all())]


def _recorded_arguments(module: nn.Module, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The module's recorded call (at x's `shape`, else its first) as arguments by name, where the module
    is fed its model's call; nothing where it is fed attnlab's own inputs."""
    calls = _CALLS.get(module, {}) if _FED.get(module) == "recorded" else {}
    call = calls.get(shape) if shape is not None else next(iter(calls.values()), None)
    if call is None:
        return {}
    return {**dict(zip((p.name for p in forward_parameters(type(module))), call.args)), **call.kwargs}


def _origin(module: nn.Module) -> type:
    """The transformers class the module is or derives from (a copy with a planted mistake subclasses it)."""
    return next((k for k in type(module).__mro__ if k.__module__.startswith("transformers.models.")), type(module))


def owning_models(module: nn.Module) -> list[type]:
    """The model classes of the module's modeling file built from its config's class, the base
    model (`...Model`) first: those that may hold the class."""
    from transformers import PreTrainedModel

    origin = _origin(module)
    modeling = sys.modules[origin.__module__]
    config_cls = type(module.config)
    found = [c for c in vars(modeling).values() if inspect.isclass(c) and issubclass(c, PreTrainedModel)
             and c.__module__ == modeling.__name__ and getattr(c, "config_class", None) is config_cls
             and not c.__name__.endswith("PreTrainedModel")]
    return sorted(found, key=lambda c: (not c.__name__.endswith("Model"), len(c.__name__)))[:_MODEL_CLASSES]


def _models(module: nn.Module, x: torch.Tensor) -> list[tuple[nn.Module, nn.Module] | str]:
    """Each owning model built once, small (`hf_small`), with its instance of the class; or why not."""
    if module not in _MODELS:
        found: list[tuple[nn.Module, nn.Module] | str] = []
        layer = getattr(module, "layer_idx", None)
        for model_cls in owning_models(module):
            try:
                model = hf_small.built(model_cls, module.config, layer if isinstance(layer, int) else 0,
                                       x.device, x.dtype, lambda m: type(m) is _origin(module))
            except Exception as exc:  # noqa: BLE001 - a model class that cannot be built from this config: the next one
                asked = missing_packages(model_cls) if isinstance(exc, ImportError) else []
                missing = " or ".join([p for p in asked if p in str(exc).lower()] or asked)  # those its error names
                found.append(f"{model_cls.__name__} needs {missing}{_NOT_INSTALLED}" if missing else
                             f"{model_cls.__name__}: {type(exc).__name__}: {exc}".splitlines()[0][:160])
                continue
            target = _instance(model, module)
            found.append((model, target) if target is not None else f"{model_cls.__name__} holds no {_origin(module).__name__}")
        _MODELS[module] = found
    return _MODELS[module]


def _record(module: nn.Module, x: torch.Tensor, own: Exception | None) -> Call:
    problems: list[str] = []
    for found in _models(module, x):
        if isinstance(found, str):
            problems.append(found)
            continue
        call, problem = _sized_call(*found, x)
        if call is not None:
            return call
        problems.append(f"{type(found[0]).__name__}: {problem}")
    problem = problems[0] if problems else f"its modeling file has no model built from {type(module.config).__name__}"
    name = type(module).__name__
    outside = [p.name for p in required(type(module)) if not providable(p.name, hf_inputs.provided(type(module)))]
    if outside and not problem.split(": ", 1)[-1].startswith(_TOO_FEW):  # a model that ran, without what it needs
        raise OutsideInput(f"{name}.forward needs '{outside[0]}', an input its model makes from what lies outside the "
                           f"attention, and its model could not be run to make it ({problem}); run a subclass whose "
                           f"forward passes {outside[0]}=...")
    if problem.endswith(_NOT_INSTALLED):  # as a forward needing that package says it (DiNAT's natten)
        raise ImportError(f"{name}'s inputs are its model's, and {problem}")
    why = f"{type(own).__name__}: {' '.join(str(own).split())}"[:120] if own is not None else "none"
    message = (f"{name}: its model's call could not be recorded at these sizes ({problem}); attnlab's own inputs "
               f"failed ({why})")
    seen = re.search(rf"{_TOO_FEW} (\d+) tokens", problem)
    if seen:  # its model ran, at a count of its own: a run whose inputs' size is free runs at it
        raise TokensNeeded(message, int(seen.group(1)))
    raise ModelCallError(message)


def _instance(model: nn.Module, module: nn.Module) -> nn.Module | None:
    """The model's instance of the class sized as the module (RT-DETR's encoder attention is wider
    than its decoder's), at the module's layer, else its first."""
    origin = _origin(module)
    found = [m for m in model.modules() if type(m) is origin]
    shapes = {k: v.shape for k, v in module.state_dict().items()}
    found = [m for m in found if {k: v.shape for k, v in m.state_dict().items()} == shapes] or found
    layer = getattr(module, "layer_idx", None)
    return next((m for m in found if getattr(m, "layer_idx", None) == layer), found[0] if found else None)


def _sized_call(model: nn.Module, target: nn.Module, x: torch.Tensor) -> tuple[Call | None, str]:
    """The target's recorded call on the first of the model's inputs attnlab makes (`_forms`) whose
    size makes the attention see x's tokens."""
    problem = "its forward takes no input attnlab can make (token ids, embeddings, pixels, audio)"
    for make, size in _forms(model, x):
        call, why = _sized(model, target, x, make, size)
        if call is not None:
            return call, ""
        if why.startswith(_TOO_FEW) or not problem.startswith(_TOO_FEW):  # a count it runs at is kept: the run's to take
            problem = why
    return None, problem


def _sized(model: nn.Module, target: nn.Module, x: torch.Tensor, make: Any, size: int) -> tuple[Call | None, str]:
    """Resize the input (`make(size)`) until the attention sees x's tokens: the tokens grow with
    the size, so each try moves it toward the tokens wanted (`_next_size`)."""
    tokens = x.shape[-2]
    seen: dict[int, int] = {}
    failed = ""
    for tried in range(_TRIES):
        try:
            call = _filled_run(model, target, make(size))
        except Exception as exc:  # noqa: BLE001 - the model's own error at this size
            failed = failed or f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            if seen:
                break  # it ran at a size before: at the tokens that size gave
            if tried >= _HALVINGS or size // 2 < 2 * tokens:
                return None, failed
            # its first size too long for the model (a position table as long as the run's context): half of it
            size //= 2
            continue
        if call is None:
            return None, "it never called its attention"
        if tuple(call.hidden.shape[:-1]) == tuple(x.shape[:-1]):
            return call, ""
        if _on_grid(call.hidden, x) and math.prod(call.hidden.shape[1:-1]) == tokens:  # SAM 3's (b, H, W, d) windows
            call.grid = True
            return call, ""
        if call.hidden.dim() == x.dim() + 1 and call.hidden.shape[0] != x.shape[0]:
            return None, f"its model folds windows of its grid into the batch, {tuple(call.hidden.shape)}"
        if sorted(call.hidden.shape) == sorted(x.shape):  # x's axes in another order: XLNet's (T, b, d), and
            # SqueezeBERT's channels first (b, d, T), whose kernel-1 convolutions the capture reads as projections
            turn = _turn(tuple(call.hidden.shape), tuple(x.shape))
            if turn is None:
                return None, f"its model passes {type(target).__name__} its hidden states as {tuple(call.hidden.shape)}, " \
                             f"x's {tuple(x.shape)} in an order these sizes do not tell; run with another inputs.n_tokens"
            call.turn = turn
            return call, ""
        seen[size] = math.prod(call.hidden.shape[1:-1]) if _on_grid(call.hidden, x) else _tokens_seen(call.hidden, x)
        if len(set(seen.values())) < len(seen):
            break  # the size does not change the tokens
        size = max(1, _next_size(seen, size, tokens))
        while size in seen:
            size += 1
    if not seen:
        return None, failed
    return None, f"{_TOO_FEW} {min(seen.values())} tokens from its smallest input; run with inputs.n_tokens=" \
                 f"{min(seen.values())}"


def _on_grid(hidden: torch.Tensor, x: torch.Tensor) -> bool:
    """The model's hidden states are x's batch of (H, W) grids of tokens as wide as x's: a forward that reads
    its input as (b, H, W, d) (`hf_grid.axes`), whose tokens are H * W."""
    return x.dim() == 3 and hidden.dim() == 4 and (hidden.shape[0], hidden.shape[-1]) == (x.shape[0], x.shape[-1])


def _tokens_seen(hidden: torch.Tensor, x: torch.Tensor) -> int:
    """How many tokens the model's hidden states hold: the last axis but one, the last where they are
    channels first (b, x's width, T) (Vocos' kernel-1 convolutions)."""
    if hidden.dim() == 3 and hidden.shape[1] == x.shape[-1] != hidden.shape[-1]:
        return hidden.shape[-1]
    return hidden.shape[-2] if hidden.dim() >= 2 else hidden.shape[0]


def _turn(given: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The order of x's axes (of `shape`) in the model's hidden states (`given`), read from their
    sizes: None where two of x's axes are of one size, so the order is not told."""
    if len(set(shape)) < len(shape):
        return None
    return tuple(shape.index(size) for size in given)


def _next_size(seen: dict[int, int], size: int, tokens: int) -> int:
    """The size to try next: by the line through the last two tries (a model that adds tokens of its own,
    CPM-Ant's prompt, as well as one whose tokens grow in proportion), at first by the ratio alone."""
    if len(seen) < 2:
        return round(size * tokens / max(seen[size], 1))
    (s0, t0), (s1, t1) = list(seen.items())[-2:]
    return round(s1 + (tokens - t1) * (s1 - s0) / (t1 - t0))  # t1 != t0: equal counts ended the tries


def _filled_run(model: nn.Module, target: nn.Module, inputs: dict[str, Any]) -> Call | None:
    """`_run` on the inputs; where the model fails on them, again with the extras it takes (`hf_extras`),
    whose own error, if it fails too, is the one named."""
    try:
        return _run(model, target, inputs)
    except Exception:
        more = hf_extras.extras(model, inputs)
        if not more:
            raise
    return _run(model, target, {**inputs, **more})


def _run(model: nn.Module, target: nn.Module, inputs: dict[str, Any]) -> Call | None:
    found: list[Call] = []
    parameters = forward_parameters(type(target))
    hidden_name = parameters[0].name if parameters else ""

    def pre(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs.get(hidden_name)
        if isinstance(hidden, torch.Tensor):
            found.append(Call(args, kwargs, hidden))
        raise _Stop

    handle = target.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        model(**inputs)
    except _Stop:
        pass
    finally:
        handle.remove()
    return found[0] if found else None


def _forms(model: nn.Module, x: torch.Tensor) -> list[tuple[Any, int]]:
    """The model's inputs attnlab makes, as (make(size), first size): x itself as its embeddings,
    token ids, else pixels (b, channels, side, width) or patches placed by their (x, y) (b, patches,
    channels * patch * patch), audio features (b, frames, bins) or (b, bins, frames), samples (b,
    samples) or (b, channels, samples), or a time series' past (b, steps), the resized axis first at
    its config's size."""
    accepted = {p.name for p in forward_parameters(type(model))}
    config: Any = model.config  # a transformers config: its attributes are its model type's
    batch, tokens = (x.shape[0], x.shape[-2]) if x.dim() == 3 else (1, x.shape[0])
    extra = {"use_cache": False} if "use_cache" in accepted else {}
    forms: list[tuple[Any, int]] = []
    if "inputs_embeds" in accepted and _width(config) in (x.shape[-1], None):
        forms.append((lambda size: {"inputs_embeds": x.reshape(batch, tokens, -1), **extra}, tokens))
    if "input_ids" in accepted and getattr(config, "vocab_size", None):
        def ids(size: int) -> dict[str, Any]:  # (b, size): a model that adds tokens of its own (CPM-Ant's prompt) sees more
            # never 0 nor the padding id, which a model masks as padding (CPM-Ant's id 0): every token is one
            made = 1 + torch.arange(batch * size, device=x.device).reshape(batch, size) % (config.vocab_size - 1)
            pad = getattr(config, "pad_token_id", None)
            made = made.masked_fill(made == pad, (pad + 1) % config.vocab_size) if isinstance(pad, int) else made
            return {"input_ids": made, **({"decoder_input_ids": made} if "decoder_input_ids" in accepted else {}), **extra}

        forms.append((ids, tokens))

    def signal(name: str, shape: tuple[int, ...], axis: int) -> Any:
        return lambda size: {name: torch.randn(*shape[:axis], size, *shape[axis + 1:], device=x.device,
                                               dtype=x.dtype), **extra}

    if "pixel_values" in accepted:  # one row of patches (a convolutional backbone's stride where no patch), widened
        side = getattr(config, "patch_size", None) or getattr(config, "image_size", None) or 64
        side = side[0] if isinstance(side, (list, tuple)) else side
        forms.append((signal("pixel_values", (batch, getattr(config, "num_channels", 3), side, side), 3), side))
        image = getattr(config, "image_size", None)
        if isinstance(image, int) and image != side:  # a tower whose positions are its whole image's (Llama 4's rotary)
            forms.append((lambda size: {"pixel_values": torch.randn(batch, getattr(config, "num_channels", 3), size,
                                                                     size, device=x.device, dtype=x.dtype), **extra},
                          image))
    placed = next((p.name for p in required(type(model)) if p.name.endswith("position_ids")), None)
    if "pixel_values" in accepted and placed:  # an image as its patches, each placed by its (x, y) (Gemma 4's vision)
        side = getattr(config, "patch_size", None) or 1
        width = getattr(config, "num_channels", 3) * side * side
        forms.append((lambda size: {"pixel_values": torch.rand(batch, size, width, device=x.device, dtype=x.dtype),
                                    placed: _grid_positions(batch, size, x.device), **extra}, tokens))
    if "input_features" in accepted:
        bins = next((getattr(config, s) for s in ("num_mel_bins", "feature_size", "input_feat_size", "num_mel_filters")
                     if getattr(config, s, None)), 80)
        forms += [(signal("input_features", (batch, 64, bins), 1), 64),
                  (signal("input_features", (batch, bins, 64), 2), 64)]
        # the bins its own feature extractor makes (Gemma 4's 128), where the config names none; else the width its
        # first linear layer takes (Granite Speech 5's stacked mel frames and their deltas, 4 x num_mel_bins)
        for made in dict.fromkeys((_extractor_bins(model), _first_linear_width(model))):
            if made not in (None, bins):
                forms.append((signal("input_features", (batch, 64, made), 1), 64))
    if "past_values" in accepted and isinstance(getattr(config, "context_length", None), int):
        forms.append((_series(config, batch, x), config.context_length + max(getattr(config, "lags_sequence", None) or [0])))
    if "input_values" in accepted:  # mono samples, or with a channels axis (a codec's (b, audio_channels, samples))
        forms += [(signal("input_values", (batch, 1600), 1), 1600),
                  (signal("input_values", (batch, getattr(config, "audio_channels", None) or 1, 1600), 2), 1600)]
    parameters = forward_parameters(type(model))
    if parameters and parameters[0].name == "hidden_states":  # an encoder of features (Granite Speech's): its input width
        width = next((getattr(config, s) for s in ("input_dim", "feature_size", "num_mel_bins") if getattr(config, s, None)),
                     _width(config))
        if width:
            forms.append((signal("hidden_states", (batch, tokens, width), 1), tokens))
    return forms


def _extractor_bins(model: nn.Module) -> int | None:
    """The default `feature_size` of the feature extractor beside the model's modeling file (its
    package's `feature_extraction_*` module), where there is one."""
    package = type(model).__module__.rsplit(".", 1)[0]
    try:
        extraction = importlib.import_module(f"{package}.feature_extraction_{package.rsplit('.', 1)[-1]}")
    except ImportError:
        return None
    for name, cls in vars(extraction).items():
        if name.endswith("FeatureExtractor") and inspect.isclass(cls) and cls.__module__ == extraction.__name__:
            try:
                size = getattr(cls(), "feature_size", None)
            except Exception:  # noqa: BLE001 - an extractor that needs arguments names no default
                continue
            if isinstance(size, int):
                return size
    return None


def _series(config: Any, batch: int, x: torch.Tensor) -> Callable[[int], dict[str, Any]]:
    """A time series' past (Autoformer's): `size` steps of its values, all observed, and its time features;
    its model reads the last context_length of them, each with its lags from the steps before."""
    def make(size: int) -> dict[str, Any]:
        values = getattr(config, "input_size", 1)
        shape = (batch, size) if values == 1 else (batch, size, values)
        return {"past_values": torch.randn(*shape, device=x.device, dtype=x.dtype),
                "past_observed_mask": torch.ones(*shape, device=x.device, dtype=x.dtype),
                "past_time_features": torch.randn(batch, size, getattr(config, "num_time_features", 0),
                                                  device=x.device, dtype=x.dtype)}
    return make


def _grid_positions(batch: int, patches: int, device: torch.device) -> torch.Tensor:
    """(x, y) of each of `patches` on a grid as square as they fill, row by row: (b, patches, 2)."""
    rows = max(d for d in range(1, math.isqrt(patches) + 1) if patches % d == 0)
    ys, xs = torch.meshgrid(torch.arange(rows, device=device), torch.arange(patches // rows, device=device), indexing="ij")
    return torch.stack([xs.flatten(), ys.flatten()], -1).expand(batch, patches, 2)  # (b, patches, 2)


def _first_linear_width(model: nn.Module) -> int | None:
    """The input width of the model's first linear layer, in the order it registers them."""
    return next((m.in_features for m in model.modules() if isinstance(m, nn.Linear)), None)


def _width(config: Any) -> int | None:
    return next((width for s in spellings("d_in") if isinstance(width := getattr(config, s, None), int) and width), None)


def provided(cls: Any) -> tuple[str, ...]:
    """The required forward parameters a recorded call can give: any, when the class lives in a
    transformers modeling file (whether its model can be run is known only at the call)."""
    origin = next((k for k in getattr(cls, "__mro__", ()) if k.__module__.startswith("transformers.models.")), None)
    return tuple(p.name for p in required(cls)) if origin is not None else ()
