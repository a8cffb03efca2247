"""A measure of one's own beside the effect's KL, top-1 and loss: `intervene.metric=MODULE:NAME`
(or `path/to/file.py:NAME`, or a callable from Python), called once per text as

    fn(logits_before, logits_after, token_ids) -> float

`logits_before`, `logits_after`: (T, vocab) the model's logits at the text's real positions (a
padded batch's pads left out), unmodified and edited; `token_ids`: (T,) the text's ids (the loss's
targets are token_ids[1:]). Its value is kept in the effect under the function's name (a batch's:
the mean over its texts, each text's in its own effect), `effect_NAME` in the diagnostics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from torch import Tensor

from attnlab.errors import UserError
from attnlab.model.user_callables import resolve
from attnlab.modules.built import PluginError
from attnlab.record import Effect

TAKES = "fn(logits_before, logits_after, token_ids) -> float, logits (T, vocab), token ids (T,)"
KEY = "intervene.metric"


@dataclass(frozen=True)
class UserMetric:
    spec: str  # as the config holds it
    name: str  # the function's: the effect's key
    function: Callable[[Tensor, Tensor, Tensor], float]

    def __call__(self, before: Tensor, after: Tensor, token_ids: Tensor) -> float:
        """`before`, `after`: (T, vocab); `token_ids`: (T,)."""
        try:
            return float(self.function(before, after, token_ids))  # a 0-d tensor or a number
        except Exception as exc:  # noqa: BLE001 - the user's metric: fails its record, in one line
            raise PluginError(f"{KEY}={self.spec} raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc


def user_metric(spec: str) -> UserMetric:
    """The metric `spec` names, imported and checked (one line naming it if it cannot be)."""
    function = resolve(KEY, spec, TAKES)
    name = getattr(function, "__name__", "")
    name = name if name.isidentifier() else "metric"  # a lambda's <lambda>
    taken = {f.name for f in fields(Effect)}
    if name in taken:
        raise UserError(f"{KEY}={spec}: its name {name} is one of the effect's own ({', '.join(sorted(taken))}); rename it")
    return UserMetric(spec, name, function)
