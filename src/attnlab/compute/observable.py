"""Whether a run is large enough to show the variant's change (`@attnlab.variant(observable=...)`).

RoPE turns pairs of coordinates, so a head of width 1 has nothing to turn; a soft cap or a
distance bias needs enough tokens before it can be told from a bug; a projection of the wrong
width is invisible where d_in equals d_out. Below the declared size the diagnosis could only
guess, so the run says in one line that the change cannot be observed instead of a finding.
"""

from __future__ import annotations

from attnlab.compute.memory import Size
from attnlab.errors import UserError
from attnlab.modules.variant_spec import VariantSpec

MEASURES = ("n_tokens", "head_dim", "d_in", "d_out", "|d_in - d_out|")


def measures(size: Size) -> dict[str, int]:
    """The run's size in the terms a declaration uses (a module without heads: head_dim = d_out)."""
    return {"n_tokens": size.n_tokens, "head_dim": size.d_out // max(size.heads, 1), "d_in": size.d_in,
            "d_out": size.d_out, "|d_in - d_out|": abs(size.d_in - size.d_out)}


def unobservable(spec: VariantSpec, size: Size) -> str | None:
    """One sentence when the run is below the size at which `spec`'s change can be seen, else None."""
    have = measures(size)
    unknown = sorted(set(spec.observable) - set(have))
    if unknown:
        raise UserError(f"variant '{spec.name}' declares observable={unknown}: allowed are {', '.join(MEASURES)}")
    short = [(key, least) for key, least in spec.observable.items() if have[key] < least]
    if not short:
        return None
    at = ", ".join(f"{key} {have[key]}" for key, _ in short)
    needs = " and ".join(f"{key} >= {least}" for key, least in short)
    return f"{spec.name}'s change cannot be observed at this size ({at}; it needs {needs}): not diagnosed"
