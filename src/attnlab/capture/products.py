"""What a product is, read from where its operands come from:

- a product with a projection parameter (`x @ W_key`, `nn.Linear`, a fused `qkv` Linear) makes a
  projection; a fused projection's output remembers each element's column, so its queries, keys
  and values are told apart by position through every view and split;
- the first product of two projection-derived tensors is the scores; its operands are labelled
  queries and keys by the parameters they come from (by their position in the product only
  when that cannot tell), so `keys @ queries.T` keeps its queries line as the queries;
- the product of the (possibly dropped-out) weights with a projection is the context, that
  projection the values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attnlab.capture.provenance import ACTIVATIONS, ATTENTION, Head, Recording
from attnlab.capture.tags import Tag
from attnlab.capture.torch_calls import arranged, as_einsum, replayed

_WEIGHTS_TIMES_VALUES = [sorted([a, b], key=str) for a in ATTENTION for b in ACTIVATIONS]


def product(rec: Recording, func: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
            out: torch.Tensor) -> None:
    spec = as_einsum(name, args, kwargs)
    if spec is None or not isinstance(out, torch.Tensor):
        return
    operands, letters, out_letters = spec
    tags = [rec.tag(t) for t in operands]
    kinds = [t.kind if t is not None else None for t in tags]
    if "param" in kinds:
        _projection(rec, func, args, kwargs, spec, tags, kinds.index("param"), out)
        return
    known = [t for t in tags if t is not None]
    if len(known) != len(tags):  # an untagged operand: neither the scores nor the context
        if [t.kind for t in known] == ["proj"]:  # a projection times its model's table (BROS's box positions):
            rec.set_tag(out, Tag("proj"))  # a term computed from it, which added to the scores is no scale
        return
    if all(k in ACTIVATIONS for k in kinds) and (any(t.table for t in known) or _unnamed(rec, known)):
        rec.set_tag(out, Tag("proj"))  # the queries times a projected table (XLNet's positions): a term, not scores
    elif all(k in ACTIVATIONS for k in kinds):
        head = _repeated_product(rec, operands, letters, out_letters)
        if head is None:
            _scores(rec, name, operands, letters, out_letters, known, out)
        else:
            rec.set_tag(out, Tag("scores", head=head))  # the scores written out again (a denominator)
    elif sorted(kinds, key=str) in _WEIGHTS_TIMES_VALUES:
        _context(rec, operands, letters, out_letters, known, out)


def _projection(rec: Recording, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                spec: tuple[list[torch.Tensor], list[str], str], tags: list[Tag | None], i: int,
                out: torch.Tensor) -> None:
    operands, letters, out_letters = spec
    param = tags[i]
    assert param is not None  # the operand `product` found a parameter in
    if id(operands[i]) in rec.out and tags[1 - i] is not None:  # the merged context, as the output projection saw it
        rec.out_inputs.append(_merged(operands[1 - i], letters[1 - i], letters[i], out_letters))
    layout = rec.fused.get(id(operands[i]))
    column_roles = layout.column_roles(out.shape[-1]) if layout is not None else None
    columns = None if column_roles is None else torch.arange(out.shape[-1]).expand(out.shape)  # each one's column
    item = _item(tags[1 - i])
    if tags[1 - i] is None and param.role is None and layout is None:  # a table its model hands it, projected
        rec.set_tag(out, Tag("proj", table=True))
        return
    if param.factor == 1.0:
        rec.set_tag(out, Tag("proj", param.role, columns=columns, column_roles=column_roles, item=item,
                             own=id(operands[i]) in rec.roleless and layout is None))
        return
    # x @ (W_query * c): the product once more with the unscaled parameter
    base = replayed(func, args, kwargs, operands[i], param.base, [out]) if param.base is not None else None
    rec.set_tag(out, Tag("proj", param.role, param.factor, base[0] if base else None, columns=columns,
                         column_roles=column_roles, item=item))


def _unnamed(rec: Recording, tags: list[Tag]) -> bool:
    """A product of two projections made by parameters of no role, in a class whose parameters name its queries
    and keys (ConvBERT's span-based convolution kernel times its own projection): not the scores. Queries
    whose fused columns a rotation mixed (Phi-3's) have no role either, but were made by a projection of one."""
    return rec.named_qk and all(t.kind == "proj" and t.own for t in tags)


def _merged(given: torch.Tensor, letters: str, param_letters: str, out_letters: str) -> torch.Tensor:
    """What an output projection contracting several axes at once was given (XLNet's einsum("ibnd,hnd->ibh")
    over heads and head size), those axes merged last as the heads merged into one width are."""
    contracted = [c for c in letters if c in param_letters and c not in out_letters]
    if len(contracted) < 2:
        return given
    kept = "".join(c for c in letters if c not in contracted)
    return arranged(given, letters, kept + "".join(contracted)).flatten(-len(contracted))  # (..., heads * head_dim)


def _item(tag: Tag | None) -> int | None:
    """The one batch item an activation holds (a loop over the batch projects one at a time), else None."""
    if tag is None or tag.kind != "input":
        return tag.item if tag is not None else None
    if tag.items is None or not tag.items.numel():
        return None
    low, high = tag.items.aminmax()  # one item iff they agree: unique's sort cost a training probe half its time
    return int(low) if low == high else None


def _repeated_product(rec: Recording, operands: list[torch.Tensor], letters: list[str], out_letters: str) -> int | None:
    """The index of a head whose score product this is again (a softmax's denominator), else None."""
    for index, head in enumerate(rec.heads):
        first = head.operands
        if first is None or (letters, out_letters) != (first[1], first[2]):
            continue
        if all(a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
                          and a.dtype == b.dtype) for a, b in zip(operands, first[0])):  # `k.T` is a new view
            return index
    return None


def _scores(rec: Recording, name: str, operands: list[torch.Tensor], letters: list[str], out_letters: str,
            tags: list[Tag], out: torch.Tensor) -> None:
    row, col = out_letters[-2], out_letters[-1]
    batch = out_letters[:-2]
    position = [0 if row in letters[0] and row not in letters[1] else 1]
    position.append(1 - position[0])  # operand index in the row (queries) and column (keys) position
    roles = (rec.role(tags[position[0]]), rec.role(tags[position[1]]))
    if roles == ("keys", "queries"):  # keys @ queries.T: label by provenance, not by position
        position.reverse()
    items = {tags[i].item for i in position}
    head = Head(operands=(operands, letters, out_letters), roles=roles, item=items.pop() if len(items) == 1 else None)
    for stage, i in zip(("queries", "keys"), position):
        operand, tag = operands[i], tags[i]
        letter = row if row in letters[i] else col
        if tag.factor != 1.0:  # pre-scaled: the stage is the projection itself, the factor is noted
            if tag.base is not None:
                operand = tag.base
            elif tag.factor != 0.0:
                operand = operand / tag.factor  # scaled in place: a copy, the only way back
            head.prescale[stage] = tag.factor
        head.found[stage] = arranged(operand, letters[i], batch + letter)
        head.sources[stage] = rec.role(tag)
        if tag.mixed:
            head.mixed.add(stage)
    head.found["scores"] = arranged(out, out_letters, out_letters)
    if name == "baddbmm":  # added + q @ k.T: the softmax input; the plain product never existed
        head.found["scaled_scores"] = out
        head.found["scores"] = head.found["queries"] @ head.found["keys"].mT
        head.reconstructed.add("scores")
    rec.heads.append(head)
    rec.set_tag(out, Tag("scores" if name != "baddbmm" else "derived", head=len(rec.heads) - 1))


def _context(rec: Recording, operands: list[torch.Tensor], letters: list[str], out_letters: str, tags: list[Tag],
             out: torch.Tensor) -> None:
    w = 0 if tags[0].kind in ATTENTION else 1
    v = 1 - w
    head = rec.head_of(tags[w])
    if tags[w].head is None:
        return
    if "context" in head.found:  # weights @ values written out again: the same context, not a new stage
        if head.output is not None and out.shape == head.output.shape and torch.equal(out, head.output):
            rec.set_tag(out, Tag("context", head=tags[w].head))
        else:  # the same weights on other values (each half of a split V): no one of them is the head's
            head.value_products += 1
        return
    contracted = (set(letters[w]) & set(letters[v])) - set(out_letters)
    batch = "".join(c for c in out_letters if c in letters[w] and c in letters[v])
    query = next((c for c in letters[w] if c not in letters[v]), None)
    key = next(iter(contracted), None)
    if query is None or key is None or len(contracted) != 1:
        return
    value_dims = "".join(c for c in letters[v] if c not in letters[w])
    applied = arranged(operands[w], letters[w], batch + query + key)
    weights = head.found.get("weights")
    if weights is None:
        head.found["weights"] = applied
    elif not _same_values(applied, weights):
        head.found["weights_applied"] = applied
    head.found["values"] = arranged(operands[v], letters[v], batch + key + value_dims)
    head.sources["values"] = rec.role(tags[v])
    if tags[v].mixed:
        head.mixed.add("values")
    head.found["context"] = arranged(out, out_letters, batch + query + value_dims)
    head.output = out
    head.value_products = 1
    rec.set_tag(out, Tag("context", head=tags[w].head))


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The weights as multiplied equal the softmax's output (eval-mode dropout returns them as they are)."""
    return a is b or (a.shape == b.shape and a.data_ptr() == b.data_ptr() and a.stride() == b.stride()) or (
        a.shape == b.shape and bool(torch.equal(a, b)))
