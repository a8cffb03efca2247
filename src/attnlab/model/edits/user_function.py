"""intervene=function: `intervene.function=MODULE:NAME` (or a callable from Python) given the layer's
context vectors (1, T, H, hs) and returning their replacement."""

from torch import Tensor

from attnlab.model.edits.kind_base import Chosen, ContextKind
from attnlab.model.user_callables import resolve

TAKES = "taking and returning the context vectors (1, T, heads, head size)"


class UserFunction(ContextKind):
    needs = "function"
    heads_known = False
    per_head = False

    def contexts(self, chosen: Chosen, values: Tensor, patched: Tensor | None,
                 lengths: tuple[int, ...] | None) -> Tensor:
        context: Tensor = resolve("intervene.function", str(chosen.function), TAKES)(values)  # (1, T, H, hs)
        return context

    def what(self, chosen: Chosen) -> str:
        return f"replaced by what {chosen.function} returned"


KIND = UserFunction()
