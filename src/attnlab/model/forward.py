"""Running a model on token ids up to its final hidden states, with what its attention layers receive.

A Hugging Face model runs to its end: its own logits are what the effects compare (its logit
scaling, softcapping and tied head applied as its forward applies them), and the final hidden
states are its output head's input. Any other model stops at the final norm's output, or at its
output head's input where no module is named like a final norm (a hook raises): its logits are made
afterwards from the head, a chunk of positions at a time (attnlab.model.effect). A forward pre-hook keeps
each chosen layer's input exactly as the layer received it (hidden states, mask, position
embeddings), so a module can be captured, or a variant run, on what the model really gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.modules.built import CallConvention
from attnlab.modules.families import family_of

FINAL_NORMS = ("ln_f", "final_norm", "norm", "final_layernorm", "final_layer_norm", "norm_f")
HEADS = ("lm_head", "out_head", "head", "embed_out", "classifier")
# an argument an attention returns after its output for the next layer: T5's relative position bias,
# computed by its first layer and passed on to the rest
PASSED_ON = "position_bias"
Output = Tensor | tuple[Any, ...] | list[Any]  # what an attention layer returns (Hugging Face's: a tuple, output first)


@dataclass
class LayerCall:
    """One attention layer's call in the unmodified forward."""

    hidden: Tensor  # (B, T, d): the hidden states it received
    args: tuple[Any, ...]  # the positional arguments after them
    kwargs: dict[str, Any]  # the keyword arguments (mask, position embeddings, ...)
    returned: int | None = None  # None: it returned a tensor; n: a tuple of n items, the output first
    hidden_key: str | None = None  # the keyword the hidden states came under (Llama: hidden_states=), else first positional
    passed_on: tuple[Tensor, ...] = ()  # what it returned after its output for the next layer (PASSED_ON), as it returned it
    as_list: bool = False  # it returned a list, not a tuple (OpenAI GPT's attention: its block concatenates lists)

    def with_hidden(self, hidden: Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with `hidden` in place of the hidden states it received."""
        if self.hidden_key is None:
            return (hidden, *self.args), self.kwargs
        return self.args, {**self.kwargs, self.hidden_key: hidden}


def hidden_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Tensor, str | None]:
    """The hidden states of an attention call: the first positional argument, else the first tensor keyword."""
    if args:
        return args[0], None
    key = next((k for k, v in kwargs.items() if isinstance(v, Tensor) and v.dim() == 3), None)
    if key is None:
        raise UserError("an attention layer was called with no hidden states attnlab can find")
    return kwargs[key], key


@dataclass
class Final:
    """What a forward ends with: the final hidden states and, from a Hugging Face model, its own logits."""

    hidden: Tensor  # (B, T, d)
    logits: Tensor | None = None  # (B, T, vocab) as the model's forward returned them


class _Stop(Exception):
    def __init__(self, hidden: Tensor) -> None:
        super().__init__("final hidden states reached")
        self.hidden = hidden


def final_norm(model: nn.Module) -> nn.Module | None:
    """The final norm the model's family adapter names, else the last module named like one (ln_f,
    final_norm, norm) outside the blocks (OPT's blocks hold a final_layer_norm of their own): its
    output is the final hidden states."""
    declared = family_of(model).final_norm
    if declared and declared in dict(model.named_modules()):
        return model.get_submodule(declared)
    found = [module for name, module in model.named_modules()
             if name.rpartition(".")[2] in FINAL_NORMS and not any(part.isdigit() for part in name.split("."))]
    return found[-1] if found else None


def output_head(model: nn.Module) -> nn.Module:
    output_embeddings = getattr(model, "get_output_embeddings", None)  # a Hugging Face model's
    head: nn.Module | None = output_embeddings() if output_embeddings is not None else None
    if head is None:
        head = next((m for name, m in model.named_modules() if name.rpartition(".")[2] in HEADS), None)
    if head is None:
        raise UserError(f"{type(model).__name__}: no output head ({', '.join(HEADS)}) to make the logits with")
    return head


def final_hidden(model: nn.Module, ids: Tensor, hf: bool, attention: Sequence[nn.Module] = (),
                 keep: AbstractSet[int] = frozenset(), given: dict[str, Any] | None = None
                 ) -> tuple[Final, dict[int, LayerCall]]:
    """(the forward's Final, {layer: LayerCall} for the layers in `keep`). `ids`: (B, P) the ids at
    the logits' positions; `given`: the forward's arguments where they are not `ids` alone
    (attnlab.model.inputs: an encoder–decoder's, an image)."""
    calls: dict[int, LayerCall] = {}
    hooks = []
    head_input: list[Tensor] = []

    def keep_input(index: int) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        def pre(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden, key = hidden_of(args, kwargs)
            rest = {k: v for k, v in kwargs.items() if k != key}
            calls[index] = LayerCall(hidden.detach(), tuple(args[1:]), rest, hidden_key=key)
        return pre

    def keep_return(index: int) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any], Output], None]:
        def post(_module: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], out: Output) -> None:
            call = calls[index]
            call.returned = len(out) if isinstance(out, (tuple, list)) else None
            call.as_list = isinstance(out, list)
            if call.returned and PASSED_ON in call.kwargs and isinstance(out[1], Tensor):
                call.passed_on = (out[1].detach(),)
        return post

    def stop(_module: nn.Module, _args: tuple[Any, ...], out: Tensor) -> NoReturn:
        raise _Stop(out.detach())

    def stop_before(_module: nn.Module, args: tuple[Any, ...]) -> NoReturn:  # a model without a final norm: what its output head is given
        raise _Stop(args[0].detach())

    def given_head(_module: nn.Module, args: tuple[Any, ...]) -> None:  # a Hugging Face model runs on: its head's input is the final hidden states
        head_input.append(args[0].detach())

    for index in keep:
        hooks.append(attention[index].register_forward_pre_hook(keep_input(index), with_kwargs=True))
        hooks.append(attention[index].register_forward_hook(keep_return(index), with_kwargs=True))
    if hf:
        hooks.append(output_head(model).register_forward_pre_hook(given_head))
    else:
        norm = final_norm(model)
        hooks.append(norm.register_forward_hook(stop) if norm is not None
                     else output_head(model).register_forward_pre_hook(stop_before))
    try:
        with torch.no_grad():
            out = model(**given) if given else model(input_ids=ids, use_cache=False) if hf else model(ids)
    except _Stop as reached:
        return Final(reached.hidden), calls
    finally:
        for hook in hooks:
            hook.remove()
    logits = getattr(out, "logits", None)
    if logits is not None and logits.dim() == 2:  # a classifier's (1, labels): one position, its head's input (1, d)
        logits, head_input = logits[:, None], [hidden[:, None] for hidden in head_input]
    if hf and head_input and logits is not None and logits.shape[:2] == ids.shape:
        return Final(head_input[-1], logits.detach()), calls
    raise UserError(f"{type(model).__name__}: its forward never ran its final norm or output head")


class AsLayerCalled(CallConvention):
    """A module called as the model called the layer's attention (its mask, position embeddings,
    cache), with the hidden states given in place of the ones it received; the output is the
    first element of a returned tuple (Hugging Face's (output, weights))."""

    def __init__(self, call: LayerCall) -> None:
        self.layer_call = call
        self.name = "as the model called the layer"

    def arguments(self, module: nn.Module, x: Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return self.layer_call.with_hidden(x)


class InModel(nn.Module):
    """A variant where the layer's attention was: takes what the layer took, returns as it returned
    (a tuple's other items, its attention weights and cache, as None; a position bias the layer
    passes on, `passed_on`, as the layer returned it, so the layers after keep theirs). `as_called`:
    a variant built from the model's config, given the layer's arguments and returning its own result."""

    def __init__(self, variant: nn.Module, returned: int | None, batched: bool, as_called: bool = False,
                 passed_on: tuple[Tensor, ...] = (), as_list: bool = False) -> None:
        super().__init__()
        self.variant = variant
        self.returned = returned
        self.batched = batched
        self.as_called = as_called
        self.passed_on = passed_on
        self.as_list = as_list

    def __getattr__(self, name: str) -> Any:
        """What the block reads from its attention besides calling it (Ergo's `self_attn.o_proj`): the variant's."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("variant"), name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.as_called:
            return self.variant(*args, **kwargs)
        hidden_states, _ = hidden_of(args, kwargs)  # (B, T, d)
        if self.batched:
            out = self.variant(hidden_states)  # (B, T, d)
        else:  # a 2-D variant: each batch item alone
            out = torch.stack([self.variant(item) for item in hidden_states])  # B x (T, d) -> (B, T, d)
        out = out[0] if isinstance(out, tuple) else out
        if self.returned is None:
            return out
        items = (out, *self.passed_on, *([None] * (self.returned - 1 - len(self.passed_on))))
        return list(items) if self.as_list else items


@contextmanager
def replaced(model: nn.Module, qualified_name: str, module: nn.Module) -> Iterator[None]:
    """The submodule at `qualified_name` swapped for `module`, and put back after."""
    parent_name, _, leaf = qualified_name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    original = getattr(parent, leaf)
    setattr(parent, leaf, module)
    try:
        yield
    finally:
        setattr(parent, leaf, original)
