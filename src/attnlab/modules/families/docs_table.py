"""The docs' families table (docs/guide/modules.md), generated from the adapters."""

from __future__ import annotations

from attnlab.modules.families.adapter import Family


def markdown_table(rows: tuple[Family, ...]) -> str:
    """The supported table of docs/guide/modules.md, one line per row."""
    lines = ["| family | attention | fused QKV | output | final norm | logits | mask | arguments |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        logits = (f"× {row.logit_scale}" if row.logit_scale else f"÷ {row.logit_divide}" if row.logit_divide
                  else f"softcap {row.logit_softcap}" if row.logit_softcap else "")
        fused = f"{row.fused_qkv} ({row.fused_order})" if row.fused_qkv else ""
        arguments = ", ".join(f"{name}={provider}" for name, provider in row.arguments.items())
        cells = [row.name, row.attention, fused, row.out_proj or "", row.final_norm or "", logits,
                 f"{row.mask}, {row.mask_values}", arguments]
        lines.append("| " + " | ".join(f"`{c}`" if c and i in (1, 2, 3, 4) else c for i, c in enumerate(cells)) + " |")
    return "\n".join(lines)
