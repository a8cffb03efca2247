"""Tensors written into a buffer and read back keep their provenance (a KV cache).

Meta's reference Llama writes its keys into a cache and reads them back
(`cache_k[:bsz, :T] = xk; keys = cache_k[:bsz, :T]`): the read is a view of the cache, not of the
keys, so a tag on the keys alone is lost. Here a buffer written with a tagged tensor gets a shadow
of its storage: each element holds which write put its value there (0: never written, -1: changed
by something else since). A tensor read from that storage takes the tag of the writes it holds —
only when they agree on what it is; a read holding unwritten or overwritten elements has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnlab.capture.tags import Tag
from attnlab.capture.torch_calls import is_inplace

# in-place writes that put the values of their tensor argument into the destination's positions
WRITES = {"__setitem__", "copy_", "index_put_", "index_copy_", "masked_scatter_", "scatter_", "index_fill_",
          "masked_fill_", "fill_", "zero_"}
_UNKNOWN = -1


@dataclass
class _Shadow:
    """One written storage: which write each element holds, and the fused column it came from."""

    storage: torch.UntypedStorage  # kept alive while the capture runs: its address keys the shadow
    element_size: int
    writes: torch.Tensor  # (storage elements,) index into `Memory.written`, 0: never written
    columns: torch.Tensor  # (storage elements,) the fused projection column of the value, -1: none


@dataclass
class Memory:
    """The shadows of every storage written with a tagged tensor during one capture."""

    shadows: dict[int, _Shadow] = field(default_factory=dict)
    written: list[Tag | None] = field(default_factory=lambda: [None])  # the tag of each write; 0 is "never written"

    def write(self, func: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
              tag_of: Callable[[torch.Tensor], Tag | None]) -> bool:
        """Record an in-place op on a buffer (an untagged destination): a write of a tagged tensor
        gets a shadow, any other change to a shadowed storage marks its elements unknown. True
        when the op was a write of tagged values."""
        destination = args[0] if args else None
        if not isinstance(destination, torch.Tensor) or not (name in WRITES or is_inplace(name)):
            return False
        values = [(t, tag) for t in [*args[1:], *kwargs.values()]
                  if isinstance(t, torch.Tensor) and t.is_floating_point() and (tag := tag_of(t)) is not None]
        shadow = self._shadow(destination, create=bool(values) and name in WRITES)
        if shadow is None:
            return False
        writes, columns = (self._view(shadow, s, destination) for s in (shadow.writes, shadow.columns))
        if name not in WRITES or len(values) > 1:  # arithmetic on the buffer: what it holds is unknown
            writes.fill_(_UNKNOWN)
            return False
        source, tag = values[0] if values else (None, None)
        if tag is not None:
            self.written.append(tag._replace(base=None, columns=None, column_roles=tag.column_roles))
        index = len(self.written) - 1 if source is not None else 0
        origin = tag.columns if tag is not None and tag.columns is not None else None
        _replay(func, args, kwargs, destination, writes, source,
                torch.full(source.shape, index, dtype=torch.long) if source is not None else None)
        _replay(func, args, kwargs, destination, columns, source,
                origin if origin is not None else (torch.full(source.shape, _UNKNOWN, dtype=torch.long)
                                                   if source is not None else None))
        return source is not None

    def tag(self, tensor: torch.Tensor) -> Tag | None:
        """The tag of what `tensor` reads from a written storage, when its elements agree on one."""
        shadow = self._shadow(tensor, create=False)
        if shadow is None or tensor.numel() == 0:
            return None
        held = self._view(shadow, shadow.writes, tensor).unique()
        if int(held.min()) <= 0:  # an element never written, or changed since
            return None
        tags = [tag for i in held if (tag := self.written[int(i)]) is not None]  # all of them: none is 0
        first = tags[0]
        if any((t.kind, t.role, t.factor, t.head) != (first.kind, first.role, first.factor, first.head) for t in tags):
            return None
        columns = self._view(shadow, shadow.columns, tensor)
        known = first.column_roles is not None and bool((columns >= 0).all())
        return first._replace(columns=columns.clone() if known else None,
                              column_roles=first.column_roles if known else None)

    def kept(self, tensor: torch.Tensor) -> torch.Tensor:
        """A stage read from a buffer, copied: the module's next call writes its buffer again."""
        return tensor.clone() if self.shadows and _address(tensor) in self.shadows else tensor

    def _shadow(self, tensor: torch.Tensor, create: bool) -> _Shadow | None:
        key = _address(tensor)
        shadow = self.shadows.get(key)
        if shadow is not None and shadow.element_size == tensor.element_size():
            return shadow
        if shadow is not None or not create or not key:
            return None
        storage = tensor.untyped_storage()
        count = storage.nbytes() // tensor.element_size()
        shadow = _Shadow(storage, tensor.element_size(), torch.zeros(count, dtype=torch.long),
                         torch.full((count,), _UNKNOWN, dtype=torch.long))
        self.shadows[key] = shadow
        return shadow

    @staticmethod
    def _view(shadow: _Shadow, flat: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
        """The shadow's elements at the positions `tensor` covers in its storage."""
        return flat.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def _address(tensor: torch.Tensor) -> int:
    """Where the tensor's storage starts; 0 for a tensor without one of its own (vmap's batched tensors)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):
        return 0


def _replay(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], destination: torch.Tensor, shadow: torch.Tensor,
            source: torch.Tensor | None, substitute: torch.Tensor | None) -> None:
    """The write once more into the shadow: the destination swapped for the shadow's view, the
    written tensor for `substitute` (a constant written is 0, "never written")."""

    def swap(value: Any) -> Any:
        if value is destination:
            return shadow
        if source is not None and value is source:
            return substitute
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return torch.zeros(value.shape, dtype=torch.long)
        if isinstance(value, float):
            return 0
        if isinstance(value, (tuple, list)):
            return type(value)(swap(v) for v in value)
        return value

    try:
        func(*(swap(a) for a in args), **{k: swap(v) for k, v in kwargs.items()})
    except (RuntimeError, TypeError, ValueError, IndexError):
        shadow.fill_(_UNKNOWN)
