"""intervene=patch: the head's (or every head's) context vectors replaced by those the same layer made on
`intervene.text`, another text of as many tokens (activation patching)."""

from torch import Tensor

from attnlab.model.edits.kind_base import Chosen, ContextKind


class Patch(ContextKind):
    needs = "text"
    other_text = True

    def contexts(self, chosen: Chosen, values: Tensor, patched: Tensor | None,
                 lengths: tuple[int, ...] | None) -> Tensor:
        assert patched is not None  # the run made it from intervene.text (other_text)
        at = slice(None) if chosen.head is None else chosen.head
        context_vec = values.clone()  # (1, T, H, hs)
        context_vec[:, :, at] = patched[:, :, at]
        return context_vec

    def what(self, chosen: Chosen) -> str:
        return f"replaced by those the layer made on {chosen.text!r}"


KIND = Patch()
