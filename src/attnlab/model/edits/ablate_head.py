"""intervene=ablate_head: head `intervene.head`'s context vectors (the output projection's input) set to
zero (`intervene.mode=zero`) or to their mean over the positions (`mode=mean`)."""

from torch import Tensor

from attnlab.model.edits.head_hooks import position_mean
from attnlab.model.edits.kind_base import Chosen, ContextKind


class AblateHead(ContextKind):
    needs = "head"
    shown = ("mode",)

    def contexts(self, chosen: Chosen, values: Tensor, patched: Tensor | None,
                 lengths: tuple[int, ...] | None) -> Tensor:
        at = slice(None) if chosen.head is None else chosen.head
        context_vec = values.clone()  # (1, T, H, hs)
        # a mean is over a text's own positions, never its pads
        context_vec[:, :, at] = position_mean(values[:, :, at], lengths) if chosen.mode == "mean" else 0.0
        return context_vec

    def what(self, chosen: Chosen) -> str:
        return f"set to {'their mean over the positions' if chosen.mode == 'mean' else 'zero'}"


KIND = AblateHead()
