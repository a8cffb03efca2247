"""How attnlab builds a module from the config and calls it: the one seam between attnlab and a
plugin's class.

- `plan(name, values, params)` looks the variant up and fills its constructor once, as a
  `Construction`: the arguments, and the counts the rest of the run reads from them (heads,
  key/value heads, context length), so nothing downstream parses constructor arguments again.
- `Construction.build(seed)` builds the module right after the seed, as the source does, into a
  `BuiltModule`.
- `BuiltModule.call(x)` calls its forward under its `CallConvention` and unpacks what it returns
  into a `Returned`: the output tensor, and which element of what was returned it is.

Capture, profile, the batch-mixing check and the probe for batches all call modules through here.
Construction: `Cls(d_in, d_out, ...)` (filled by `registry.constructor_kwargs`); a class built from
one config object (nanoGPT's GPTConfig, a Hugging Face PretrainedConfig) is registered wrapped in a
`configs.ConfigConstructor` whose signature is in attnlab's names, so the same filling and counts
apply. Calls: `module(x)`, or `HuggingFaceCall` for a module holding a Hugging Face config (its
model's mask and rotary embeddings); the output is the return value, or of a tuple, list or
model-output object its (batch, tokens, ·) element.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from attnlab.errors import TokensNeeded, UserError, WidthNeeded
from attnlab.modules import arguments, hf, hf_call, hf_grid, hf_inputs, hf_record
from attnlab.modules.configs import ConfigConstructor
from attnlab.modules.registry import (
    CONSTRUCTOR_KEYS,
    DEFAULT_VALUES,
    SPELLINGS,
    constructor_kwargs,
    get_variant,
)
from attnlab.modules.roles import QKV_ROLES, declared_count, manual_seed, module_heads, module_roles, unit_kernel
from attnlab.modules.variant_spec import VariantSpec


class PluginError(RuntimeError):
    """A variant that could not be built or run; it fails that record only."""


@dataclass(frozen=True)
class Returned:
    """What a forward returned, and the tensor attnlab takes as the module's output."""

    output: Any  # the output tensor, or what came back when no element is one
    what: str  # what forward returned as a whole, e.g. "tuple(Tensor (2, 6, 4), Tensor (2, 2, 6, 6))"
    element: str | None = None  # how the output is reached in it ("[0]", ".last_hidden_state"); None: the value itself
    weights: torch.Tensor | None = None  # attention weights returned beside the output: (b, heads, queries, keys)

    @property
    def description(self) -> str:
        """The output's shape, or its type when it is not a tensor (for an error that says what came back)."""
        return str(tuple(self.output.shape)) if isinstance(self.output, torch.Tensor) else type(self.output).__name__


class CallConvention:
    """How a module's forward is called and what of its return is the output: `module(x)`; the
    return value itself, or of a returned tuple, list or model-output object (a mapping) the first
    element whose leading dims are the input's (batch, tokens), else its first element.

    A convention for forwards that need more than `x` (an attention mask, position embeddings)
    overrides `arguments`."""

    name = "module(x)"

    def arguments(self, module: nn.Module, x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (x,), {}

    def unpack(self, value: Any, x: torch.Tensor) -> Returned:
        """The output among what forward returned on `x`, and attention weights returned beside it."""
        items = _items(value)
        if not items:
            return Returned(value, _shown(value))
        what = f"{type(value).__name__}({', '.join(_shown(v) for _, v in items)})"
        rows, tokens = tuple(x.shape[:-1]), x.shape[-2]
        found = next(((k, v) for k, v in items if isinstance(v, torch.Tensor) and tuple(v.shape[:-1]) == rows), None)
        if found is None and _items(items[0][1]):  # I-BERT's ((context_vec,), (its scaling factor,)): the first one's
            inner = self.unpack(items[0][1], x)
            return Returned(inner.output, what, items[0][0] + (inner.element or ""), inner.weights)
        at, output = found or items[0]
        weights = next((v for k, v in items if k != at and isinstance(v, torch.Tensor) and v.dim() == 4
                        and tuple(v.shape[-2:]) == (tokens, tokens)), None)
        return Returned(output, what, at, weights)

    def call(self, module: nn.Module, x: torch.Tensor) -> Returned:
        args, kwargs = self.arguments(module, x)
        return self.unpack(module(*args, **kwargs), x)


class HuggingFaceCall(CallConvention):
    """A Hugging Face attention module called as its model calls it (`hf_call.forward_kwargs`: the mask
    from the model's mask function, the rotary (cos, sin), position ids, no cache)."""

    name = "module(x, attention_mask=..., position_embeddings=...)"

    def arguments(self, module: nn.Module, x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        kwargs = hf_call.forward_kwargs(module, x)
        return (x,), {**arguments.by_name(module, x, given=tuple(kwargs)), **kwargs}

    def call(self, module: nn.Module, x: torch.Tensor) -> Returned:
        from transformers.utils.import_utils import OptionalDependencyNotAvailable

        try:
            return self._call(module, x)
        except OptionalDependencyNotAvailable:  # a BaseException: said as the ImportError it stands for
            missing = " or ".join(hf.missing_packages(type(module))) or "an optional package"
            raise ImportError(f"{type(module).__name__}'s forward needs {missing}, which is not installed") from None
        except TokensNeeded:  # a channels-first model's width read as its tokens (Vocos' (b, 768, T)): the width first
            with contextlib.suppress(WidthMismatch):
                _check_width(module, x)
            raise
        except UserError:
            raise
        except Exception:
            _check_width(module, x)  # its own error, where the widths are why, said as that
            raise

    def _call(self, module: nn.Module, x: torch.Tensor) -> Returned:
        if hf_inputs.packed(module):  # a vision tower's: packed rows, each batch item a sequence of cu_seqlens
            return self.unpack(hf_inputs.packed_forward(module, x), x)
        if hf_grid.spatial(module):  # SAM's, ViTDet's: (b, H, W, d) on the tokens' grid, read back as (b, T, ·)
            def on_grid() -> Any:
                args, kwargs = self.arguments(module, x)
                grid_x = hf_grid.laid_out(module, x)
                args = tuple(grid_x if a is x else a for a in args)
                kwargs = {k: grid_x if v is x else v for k, v in kwargs.items()}
                return hf_grid.read_back(module(*args, **kwargs), x)

            # else its model's call (SAM 3's 2-D rotary, made by its layer for its window's positions)
            return self.unpack(hf_record.fed(module, x, on_grid), x)
        if hf_grid.sequence_first(module):  # (T, b, d) as its model permutes it, the output turned back
            args, kwargs = self.arguments(module, x.transpose(0, 1))
            return self.unpack(_batch_first(module(*args, **kwargs)), x)

        def own() -> Any:
            args, kwargs = self.arguments(module, x)
            return module(*args, **kwargs)

        # attnlab's own inputs while they fit, else its model's recorded call (attnlab.modules.hf_record)
        return self.unpack(hf_record.fed(module, x, own), x)


def _check_width(module: nn.Module, x: torch.Tensor) -> None:
    """A class whose query, key or value projection takes inputs of another width than the run's (Zamba's
    attention over its hidden states and embeddings side by side, MobileBERT's bottleneck): one line naming
    each projection's width, where its own error would be a matrix product's shapes; of one width for all
    of them, that width and its queries' (`WidthNeeded`), at which a run whose inputs' size is free runs."""
    projections = {name.removesuffix(".weight"): (role, module.get_submodule(name.removesuffix(".weight")))
                   for name, role in module_roles(module).items() if role in (*QKV_ROLES, "qkv") and name.endswith(".weight")}
    linear = {name: (role, owner) for name, (role, owner) in projections.items()
              if isinstance(owner, nn.Linear) or unit_kernel(owner)}  # a kernel-1 convolution is a linear map
    widths = {name: _in_width(owner) for name, (_, owner) in linear.items()}
    if widths and any(width != x.shape[-1] for width in widths.values()):
        shown = ", ".join(f"{name} {width}" for name, width in widths.items())
        message = (f"{type(module).__name__} takes inputs of other widths than the run's d_in={x.shape[-1]} "
                   f"({shown} wide): a width its model makes from more than the hidden states")
        queries = [_out_width(owner) // (3 if role == "qkv" else 1) for role, owner in linear.values()
                   if role in ("queries", "qkv")]
        if len(set(widths.values())) == 1 and queries:
            width = next(iter(widths.values()))
            raise WidthNeeded(f"{message}; inputs {width} wide run it (random inputs run there by themselves)",
                              width, queries[0])
        raise WidthMismatch(f"{message}; attnlab runs one width for the variant and its reference")


def _in_width(owner: nn.Module) -> int:
    """An nn.Linear's or a kernel-1 convolution's input width."""
    if isinstance(owner, nn.Linear):
        return owner.in_features
    assert isinstance(owner, (nn.Conv1d, nn.Conv2d))  # unit_kernel: one of the two
    return owner.in_channels


def _out_width(owner: nn.Module) -> int:
    if isinstance(owner, nn.Linear):
        return owner.out_features
    assert isinstance(owner, (nn.Conv1d, nn.Conv2d))
    return owner.out_channels


class WidthMismatch(UserError):
    """A class whose projections take another input width than the run's."""


class ByNameCall(CallConvention):
    """A forward taking more than `x` (the book's `forward(x, mask, cos, sin)`, nn.MultiheadAttention's
    query, key and value): each required parameter by name from `arguments.by_name`. A module
    declaring `batch_first = False` (torch's) gets (tokens, batch, ·) and its output turned back."""

    name = "module(x, **by name)"

    def arguments(self, module: nn.Module, x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (x,), arguments.by_name(module, x)

    def call(self, module: nn.Module, x: torch.Tensor) -> Returned:
        seq_first = getattr(module, "batch_first", None) is False and x.dim() == 3
        inputs = x.transpose(0, 1) if seq_first else x  # (T, b, d_in) for a sequence-first module
        args, kwargs = self.arguments(module, inputs)
        value = module(*args, **kwargs)
        if seq_first:
            value = _batch_first(value)
        return self.unpack(value, x)


def _batch_first(value: Any) -> Any:
    """A sequence-first module's output (or its first element) as (b, T, ·)."""
    if isinstance(value, torch.Tensor):
        return value.transpose(0, 1)
    if isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor):
        return (value[0].transpose(0, 1), *value[1:])
    return value


def _items(value: Any) -> list[tuple[str, Any]]:
    """(how to reach it, element) of a tuple, list or mapping (a model-output object is one)."""
    if isinstance(value, (tuple, list)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f".{k}", v) for k, v in value.items()]
    return []


def _shown(value: Any) -> str:
    return f"Tensor {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


SOURCE_CALL = CallConvention()
HUGGING_FACE_CALL = HuggingFaceCall()
BY_NAME_CALL = ByNameCall()


def convention_for(module: nn.Module) -> CallConvention:
    """How `module` is called: as its Hugging Face model calls it when it holds a Hugging Face
    config, by name when its forward requires more than `x` or it is sequence-first, else `module(x)`."""
    if hf.is_hf_module(module):
        return HUGGING_FACE_CALL
    if arguments.required(type(module)) or getattr(module, "batch_first", None) is False:
        return BY_NAME_CALL
    return SOURCE_CALL


@dataclass(frozen=True)
class Construction:
    """A variant's constructor filled from the config, before the module exists (the pre-flight
    sizes a run from it), and the counts the run reads from it."""

    spec: VariantSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    num_heads: int  # the head count the constructor was given; 1 for the single-head classes
    num_kv_heads: int | None  # the key/value head count it was given; None: the module's own
    context_length: int  # 0 when the constructor takes none

    @property
    def name(self) -> str:
        return self.spec.name

    def instantiate(self) -> nn.Module:
        """The module, under whatever random state torch is in (its constructor's own errors raised)."""
        return self.spec.cls(*self.args, **self.kwargs)

    def build(self, seed: int) -> BuiltModule:
        """The module, built right after torch.manual_seed(seed), as the source does."""
        manual_seed(seed)
        try:
            module = self.instantiate()
        except UserError:  # a config attribute attnlab cannot fill: refused like any bad key
            raise
        except Exception as exc:
            raise PluginError(f"variant '{self.name}' could not be built: {type(exc).__name__}: {exc}") from exc
        return BuiltModule(module, convention_for(module), self)


def plan(name: str, values: dict[str, Any], params: dict[str, Any] | None = None) -> Construction:
    """Variant `name`'s constructor filled from the top-level keys `values` (with d_in and n_tokens)
    and `params` (variant.params); a wrong name or argument is a UserError.

    One filling for every class (`_sizes_by_name`): a config-object constructor arrives as a
    `configs.ConfigConstructor` taking attnlab's names; the call convention is the built module's
    (`convention_for`)."""
    spec = get_variant(name)
    return _sizes_by_name(spec, values, params or {})


def _sizes_by_name(spec: VariantSpec, values: dict[str, Any], params: dict[str, Any]) -> Construction:
    """`Cls(d_in, d_out, ...)`, the other top-level keys by the constructor's own spelling."""
    args, kwargs = constructor_kwargs(spec, values, params)
    return Construction(spec, tuple(args), kwargs, num_heads=_count(kwargs, "num_heads", 1),
                        num_kv_heads=_count(kwargs, "num_kv_heads", None),
                        context_length=int(kwargs.get("context_length") or 0))


def create_variant(name: str, d_in: int, d_out: int, **params: Any) -> nn.Module:
    """Build a variant as `Cls(d_in, d_out, **params)` did, with the top-level keys at their
    defaults (context_length = 6, the book's tokens) for constructors that take them."""
    top = {key: params.pop(key) for key in list(params) if key in CONSTRUCTOR_KEYS}
    return plan(name, {**DEFAULT_VALUES, "d_in": d_in, "d_out": d_out, **top}, params).instantiate()


_Default = TypeVar("_Default", int, None)  # a count given an int default is an int


def _count(kwargs: dict[str, Any], key: str, default: _Default) -> int | _Default:
    """The value a constructor was given for `key` under any of its spellings, else `default`."""
    return next((int(kwargs[k]) for k in SPELLINGS[key] if kwargs.get(k) is not None), default)


@dataclass
class BuiltModule:
    """A module attnlab calls: the module, how its forward is called, and how it was built (None for
    a module built elsewhere, such as a plain nn.Module handed to `capture`)."""

    module: nn.Module
    convention: CallConvention = SOURCE_CALL
    construction: Construction | None = None

    @property
    def name(self) -> str:
        return self.construction.name if self.construction is not None else type(self.module).__name__

    def call(self, x: torch.Tensor) -> Returned:
        return self.convention.call(self.module, x)

    def takes_batches(self, d_in: int, n_tokens: int, d_out: int) -> bool:
        """One probe call on a tiny batched input (2 items x up to 3 tokens), not counted and not
        captured: a module that returns (batch, tokens, ·) gets batches; any other gets (tokens, d_in).
        A module refusing 3 tokens (Swin's window attention takes exactly its window) is probed again
        at the run's own token count. A module that fails on the batch and on (tokens, d_in) alike
        fails with its own error on the batch: its message says why, where a fallback to the 2-D
        path would fail later for another reason."""
        try:
            return self._takes_batches(d_in, min(3, n_tokens), d_out)
        except (PluginError, TokensNeeded):  # a count of its own refused at the probe's: the run's count decides
            if n_tokens <= 3:
                raise
            return self._takes_batches(d_in, n_tokens, d_out)

    def _takes_batches(self, d_in: int, tokens: int, d_out: int) -> bool:
        items = 2 if d_out != 2 else 3  # a 2-D module whose d_out equals the items would broadcast a batch
        probe = torch.rand(items, tokens, d_in, generator=torch.Generator().manual_seed(0))  # (items, tokens, d_in)
        self.module.eval()
        try:
            out = self._probe(probe)
        except (hf_record.OutsideInput, TokensNeeded, WidthNeeded):  # from outside the attention, a size of its own
            raise
        except Exception as exc:  # noqa: BLE001 - a 2-D module fails on a batch in many ways
            try:
                self._probe(probe[0])
            except Exception:  # noqa: BLE001 - neither: the module's own error on the batch says why
                message = " ".join(str(exc).split())
                raise PluginError(f"variant '{self.name}' raised {type(exc).__name__}: {message}") from exc
            return False
        return isinstance(out, torch.Tensor) and out.dim() == 3 and tuple(out.shape[:2]) == tuple(probe.shape[:2])

    def _probe(self, x: torch.Tensor) -> Any:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.call(x).output

    @property
    def num_kv_heads(self) -> int | None:
        """The key/value heads the module has: an attribute under a usual spelling, else the count its
        constructor was given; None (the reference's own) for a module that takes none, whatever the
        top-level num_kv_heads says (it reaches only constructors that name it)."""
        found = declared_count(self.module, "num_kv_heads")
        if found is not None or self.construction is None:
            return found
        return self.construction.num_kv_heads

    def own_num_heads(self, width: int) -> int | None:
        """The query heads a class built from a config with no spelling for a head count or size
        builds of its own (MaskFormer's DETR decoder reads a sub-config's decoder_attention_heads,
        BridgeTower's vision tower hidden_size // 64), one where it keeps none either (Vocos' single head):
        num_heads cannot reach them. None otherwise."""
        cls = self.construction.spec.cls if self.construction is not None else None
        if not isinstance(cls, ConfigConstructor) or cls.spelled["num_heads"] or cls.head_dim or any(cls.prefixed.values()):
            return None
        return module_heads(self.module, width) or 1

    def narrower_queries(self, d_out: int) -> tuple[int, int] | None:
        """(width, heads) of the queries of a class built from a config whose query projection is narrower
        than the d_out it was given, in the heads it keeps (ConvBERT's head_ratio halves its heads, each
        hidden_size // heads // 2 wide): the reference is built as wide. None otherwise."""
        cls = self.construction.spec.cls if self.construction is not None else None
        heads = declared_count(self.module, "num_heads")
        queries = [self.module.get_submodule(name.removesuffix(".weight")) for name, role in module_roles(self.module).items()
                   if role == "queries" and name.endswith(".weight")]
        if not isinstance(cls, ConfigConstructor) or heads is None or len(queries) != 1 \
                or not isinstance(queries[0], nn.Linear):
            return None
        width = queries[0].out_features
        return (width, heads) if width < d_out and width % heads == 0 else None

    def kv_heads_for(self, num_heads: int) -> int | None:
        """How many key/value heads of a reference with `num_heads` query heads to load into the
        module: its own count, else one per query head when its constructor was given those
        `num_heads` and no key/value count (multi-head attention against a grouped reference takes
        each group's keys repeated); None: the reference's own."""
        own = self.num_kv_heads
        if own is None and self.construction is not None and self.construction.num_heads == num_heads:
            return num_heads
        return own


def as_built(module: nn.Module | BuiltModule) -> BuiltModule:
    """A plain module as one called its own way (`convention_for`)."""
    return module if isinstance(module, BuiltModule) else BuiltModule(module, convention_for(module))
