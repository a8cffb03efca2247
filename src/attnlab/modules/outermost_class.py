"""Which of a plugin file's classes is the variant: the outermost, the one no other class of the
file builds, read from the source and never run."""

from __future__ import annotations

import inspect
import io
import textwrap
import tokenize


def outermost(classes: list[type]) -> list[type]:
    """The classes that no other class of the list builds, read from their source, never run.

    A class builds another when its body calls that class's name (`CausalAttention(d_in, ...)`
    in the source's wrapper, a ModuleList comprehension included) or names it to be called later
    (a default argument, `norm_layer=LayerNormFp32`). The whole body is read, not
    only __init__, because helpers are also built in methods __init__ calls (`_make_head`).
    Nothing is built or run: a plugin's constructor may need arguments attnlab does not have
    yet at discovery. Comments, strings, decorators and base classes do not count, so a
    subclass next to its base stays two top-level modules. A helper built through a
    module-level function is not seen. When a class's source cannot be read
    (defined by exec), every class is a candidate, as before this rule existed.
    """
    built: set[str] = set()
    for cls in classes:
        called = _names_called(cls)
        if called is None:
            return list(classes)
        built |= called - {cls.__name__}
    return [cls for cls in classes if cls.__name__ not in built]


def _names_called(cls: type) -> set[str] | None:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (OSError, TypeError, tokenize.TokenError, IndentationError, SyntaxError):
        return None
    body = _body_start(tokens)
    called = set()
    for before, token, after in zip(tokens[body:], tokens[body + 1:], tokens[body + 2:]):
        if token.type == tokenize.NAME and before.string != "." and (after.string == "(" or before.string == "="):
            called.add(token.string)
    return called


def _body_start(tokens: list[tokenize.TokenInfo]) -> int:
    """The index after the `class Name(...):` header; decorators before it are skipped too, so
    neither a decorator's arguments nor the base classes count as builds."""
    start = next((i for i, t in enumerate(tokens) if t.type == tokenize.NAME and t.string == "class"), 0)
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i].type != tokenize.OP:
            continue
        text = tokens[i].string
        depth += (text in ("(", "[", "{")) - (text in (")", "]", "}"))
        if text == ":" and depth == 0:
            return i + 1
    return len(tokens)
