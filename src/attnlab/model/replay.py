"""The unmodified forward's blocks replayed in a forward with one layer's attention replaced.

Every block that finished before layer L's block started computes, in the changed forward, exactly
what it computed unmodified (its input and weights are the same), so it returns what it returned
then instead of running again. A block is the item of the nn.ModuleList or nn.Sequential holding a
layer's attention (nanoGPT's `transformer.h.3`, Hugging Face's `model.layers.3`, the source's
`trf_blocks.3`), as attnlab.model.locate finds it. No replay when layers share a block or a block
ran more than once (shared weights): then the changed forward runs every block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from torch import Tensor, nn

from attnlab.model.forward import replaced


def _copied(out: Any) -> Any:
    """A block's output with its tensors copied: a later block that adds in place must not change it."""
    if isinstance(out, Tensor):
        return out.detach().clone()
    if isinstance(out, tuple):
        return tuple(_copied(item) for item in out)
    return out


class Replayed(nn.Module):
    """Stands where a block was: returns (a copy of) what it returned in the unmodified forward
    without running; any other attribute the model reads (Llama's `attention_type`) is the block's."""

    def __init__(self, block: nn.Module, output: Any) -> None:
        super().__init__()
        self.block = block
        self.output = output

    def forward(self, *_args: Any, **_kwargs: Any) -> Any:
        return _copied(self.output)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("block"), name)


class BlockRecording:
    """What each layer's block returned in the unmodified forward, and which blocks had finished
    when each one started."""

    def __init__(self, blocks: list[str]) -> None:
        self.blocks = blocks  # per layer, its block's qualified name
        self.outputs: dict[int, Any] = {}
        self.finished_before: dict[int, tuple[int, ...]] = {}
        self.repeated = False  # a block called twice: its output is not one thing to replay

    @classmethod
    def of(cls, attention_names: list[str]) -> BlockRecording | None:
        blocks = [name.rpartition(".")[0] for name in attention_names]
        return cls(blocks) if all(blocks) and len(set(blocks)) == len(blocks) else None

    @contextmanager
    def recording(self, model: nn.Module, until: int) -> Iterator[None]:
        """Forward hooks keeping the outputs of the blocks before layer `until`'s."""
        hooks = []
        for index, name in enumerate(self.blocks):
            block = model.get_submodule(name)
            hooks.append(block.register_forward_pre_hook(self._started(index)))
            if index < until:
                hooks.append(block.register_forward_hook(self._returned(index)))
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def _started(self, index: int) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def pre(_module: nn.Module, _args: tuple[Any, ...]) -> None:
            self.repeated = self.repeated or index in self.finished_before
            self.finished_before[index] = tuple(self.outputs)
        return pre

    def _returned(self, index: int) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def post(_module: nn.Module, _args: tuple[Any, ...], out: Any) -> None:  # out: whatever the block returns
            self.outputs[index] = _copied(out)
        return post

    def replayable(self, layer: int) -> tuple[int, ...]:
        """The blocks whose recorded output stands for them in a forward with `layer` changed."""
        if self.repeated:
            return ()
        return self.finished_before.get(layer, ())

    @contextmanager
    def replaying(self, model: nn.Module, layer: int) -> Iterator[None]:
        """Every block finished before layer `layer`'s started swapped for its recorded output."""
        with ExitStack() as stack:
            for index in self.replayable(layer):
                name = self.blocks[index]
                stack.enter_context(replaced(model, name, Replayed(model.get_submodule(name), self.outputs[index])))
            yield
