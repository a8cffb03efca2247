"""Text from plugins, inputs and records as a terminal may show it: control characters escaped.

A plugin's description, an input's label or an error's text reached the terminal raw: ESC starts a
terminal's escape sequences (a retitled window, a hidden line), BEL rings, U+202E reverses what
follows. Each such character is shown as its escape (`\\x1b`, `\\u202e`) instead.
"""

from __future__ import annotations

import re

# C0 and C1 controls, and the invisible characters that reorder or hide text (bidi marks, zero widths)
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def escaped(text: str, *, lines: bool = False) -> str:
    """`text` with every unsafe character as its escape; `lines`: newlines kept (a multi-line block)."""
    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if lines and char == "\n":
            return char
        return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"

    return UNSAFE.sub(escape, text)


__all__ = ["escaped"]
