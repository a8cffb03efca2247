"""How the diagnosis writes numbers and lists in its messages (the sinks use the same words)."""

from __future__ import annotations

import math

from attnlab.record import Finding


def fmt(x: float) -> str:
    """A number as a message shows it: 4 significant digits (0.7071, 0.003906), a whole number
    below 1000 as a float (1.0), a large one written out (a base of 500000 reads 500000, not 5e+05)."""
    if abs(x) >= 1e3 and math.isfinite(x):
        return f"{float(f'{x:.4g}'):.0f}"
    text = f"{x:.4g}"
    return text if any(c in text for c in ".en") else f"{text}.0"  # n: nan and inf stay as they are


def items(values: list[int]) -> str:
    return ", ".join(str(i) for i in values)


def heads_phrase(finding: Finding, num_heads: int) -> str:
    """How the terminal names the heads a finding holds for: "all heads", "head 2", "heads 0-3",
    "heads 0-1, 5". None (no heads axis, or a finding about splitting the heads) is all heads."""
    heads = sorted(set(finding.heads or []))
    if finding.heads is None or heads == list(range(num_heads)):
        return "all heads"
    runs: list[list[int]] = []
    for h in heads:
        if runs and h == runs[-1][-1] + 1:
            runs[-1].append(h)
        else:
            runs.append([h])
    parts = [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    return f"head {parts[0]}" if len(heads) == 1 else f"heads {', '.join(parts)}"
