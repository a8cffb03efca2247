"""An encoder–decoder's attention stacks, and `layer=` naming one of their layers.

An encoder–decoder (T5, BART) has two stacks, its encoder's and its decoder's, each a list of
self-attention layers (`model.attention_path=` within each stack) in the model's `get_encoder()` and
`get_decoder()`. `layer=encoder.1` or `layer=decoder.0` names a layer of one;
a bare `layer=N` is `encoder.N` (the stack that reads the text, as a decoder-only model's layer N
does); `layer=all` is every layer of both. Its cross-attention (T5's `EncDecAttention`, BART's
`encoder_attn`) is named and refused: it takes two inputs, the decoder's states and the encoder's
output, and a variant takes one. Internally the layers are one list, the encoder's first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torch import nn

from attnlab.errors import UserError
from attnlab.model.locate import attention_modules, chosen_layers, declared_path, layer_values

STACKS = ("encoder", "decoder")
SELF_ATTENTION = ("SelfAttention", "self_attn")  # T5's, BART's; their cross-attention is named otherwise
CROSS = "cross"
_NAMED = re.compile(r"^(?P<stack>encoder|decoder|cross)\.(?P<index>\d+)$")


@dataclass(frozen=True)
class Slot:
    """One attention layer of the model: its stack (None: a model of one stack) and its index there."""

    stack: str | None
    index: int

    @property
    def name(self) -> str:
        """As `layer=` spells it: 3, encoder.1, decoder.0."""
        return f"{self.stack}.{self.index}" if self.stack else str(self.index)

    @property
    def replaced(self) -> str | None:
        """Which attention a variant in its place stands for, where the model has several kinds."""
        return f"{self.stack} self-attention" if self.stack else None


def is_encoder_decoder(model: nn.Module) -> bool:
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False)) and hasattr(model, "get_encoder")


def stacked_attention(model: nn.Module, attention_path: str | None = None, key: str = "model"
                      ) -> tuple[list[tuple[str, nn.Module]], list[Slot]]:
    """([(qualified name, module)] of every self-attention layer, [its Slot]), the encoder's first."""
    if not is_encoder_decoder(model):
        found = attention_modules(model, attention_path, key)
        return found, [Slot(None, index) for index in range(len(found))]
    names = {id(module): name for name, module in model.named_modules()}
    attention, slots = [], []
    for stack in STACKS:
        stack_module = getattr(model, f"get_{stack}")()
        path = attention_path or declared_path(model, stack) or _self_attention_path(stack_module)
        found = attention_modules(stack_module, path, key)
        attention += [(f"{names[id(stack_module)]}.{name}", module) for name, module in found]
        slots += [Slot(stack, index) for index in range(len(found))]
    return attention, slots


def _self_attention_path(stack: nn.Module) -> str | None:
    """The stack's self-attention as an attention path (T5's `block.*.layer.0.SelfAttention`: a
    sub-layer list inside each block); None: not found by name, attnlab.model.locate's own search."""
    name = next((n for n, _ in stack.named_modules() if n.rpartition(".")[2] in SELF_ATTENTION), None)
    return re.sub(r"\.\d+(?=\.)", ".*", name, count=1) if name else None


def chosen_slots(layer: Any, slots: list[Slot]) -> list[int]:
    """`layer=` as indices into `slots`: N, all or a list as attnlab.model.locate reads them for a
    model of one stack; encoder.N, decoder.N (a bare N: encoder.N) for an encoder–decoder."""
    if slots[0].stack is None:
        return chosen_layers(layer, len(slots))
    if layer == "all":
        return list(range(len(slots)))
    return sorted({_slot_index(value, slots) for value in layer_values(0 if layer is None else layer)})


def _slot_index(value: Any, slots: list[Slot]) -> int:
    named = _NAMED.match(str(value))
    stack, index = (named["stack"], int(named["index"])) if named else (STACKS[0], int(value))
    if stack == CROSS:
        raise UserError(f"layer={value}: cross-attention takes the decoder's states and the encoder's output, a "
                        f"variant one input; swap a self-attention: layer=encoder.N or layer=decoder.N")
    try:
        return slots.index(Slot(stack, index))
    except ValueError:
        count = sum(slot.stack == stack for slot in slots)
        raise UserError(f"layer={value}: the model's {stack} has {count} layers ({stack}.0 to "
                        f"{stack}.{count - 1})") from None
