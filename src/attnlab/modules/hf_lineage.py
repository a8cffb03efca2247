"""What a transformers attention class declares by where it comes from, read from the library's own
files, never from the module attnlab runs (whose code may be the mistake):

- its lineage: the family whose class it copies (`# Copied from transformers.models.t5...T5Attention`
  above it, UDOP's) or derives from in its modular file (`class SwitchTransformersAttention(T5Attention)`):
  it scales as that family declares (T5's scores are unscaled);
- its constructor's scale: the `scaling` (else the `scale` its forward multiplies by, CvT's) a fresh
  instance of the library's class sets from the same config (Gemma 4's 1.0 under QK-norm), squared
  when its forward scales queries and keys each by it, so that a copy or subclass that changes it is
  still found;
- no scale at all: a class whose source names none (GPT-Neo's `_attn` softmaxes query @ key.T as is).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from torch import nn

from attnlab.modules.class_cache import per_class
from attnlab.modules.roles import declared_count

# the key width its scores are over, besides head_dim's spellings (T5-style classes' key_value_proj_dim)
_HEAD_DIMS = ("qk_head_dim", "key_value_proj_dim")
_COPIED = re.compile(r"#\s*Copied from transformers\.models\.(\w+)\.modeling_\w+\.(\w+)")


def transformers_class(cls: type) -> type | None:
    """The transformers modeling class `cls` is or derives from (LlamaAttention for a copy that
    subclasses it), None for a class of anyone else's: built as its family declares."""
    return next((k for k in getattr(cls, "__mro__", ()) if k.__module__.startswith("transformers.models.")), None)


def _base_in_modular(cls: type) -> str | None:
    """The model folder of the class `cls` derives from in its modular file (`modular_X.py`), if any."""
    module = sys.modules.get(cls.__module__)
    source = Path(getattr(module, "__file__", "") or "")
    modular = source.with_name(source.name.replace("modeling_", "modular_", 1))
    if not modular.name.startswith("modular_") or not modular.is_file():
        return None
    text = modular.read_text(encoding="utf-8")
    found = re.search(rf"^class {re.escape(cls.__name__)}\((\w+)\)", text, re.MULTILINE)
    if found is None:
        return None
    base = found.group(1)
    imported = re.search(rf"from \.\.(\w+)\.modeling_\w+ import (?:\([^)]*\b{base}\b|[^\n(]*\b{base}\b)", text)
    return imported.group(1) if imported else None


@per_class
def origin_type(cls: type) -> str | None:
    """The model folder whose attention class `cls` copies or derives from (`t5` for UdopAttention)."""
    try:
        lines, start = inspect.getsourcelines(cls)
        above = inspect.getsourcelines(sys.modules[cls.__module__])[0][max(0, start - 3):start - 1]
    except (OSError, TypeError, KeyError):
        return None
    copied = next((m.group(1) for line in above if (m := _COPIED.search(line))), None)
    return copied or _base_in_modular(cls)


def library_scale(module: nn.Module, origin: type | None, build: Callable[[type, Any, int], nn.Module]
                  ) -> tuple[float, str] | None:
    """The `scaling` the library's class `origin` sets from the module's config when it is not
    1/sqrt(head_dim), and where it says so; None: it sets none, or the usual one."""
    config = getattr(module, "config", None)
    if origin is None or config is None:
        return None
    try:
        fresh = build(origin, config, getattr(module, "layer_idx", 0) or 0)
    except Exception:  # noqa: BLE001 - a class its config alone does not build declares nothing here
        return None
    # its `scaling`, else the `scale` its forward multiplies by (CvT's width ** -0.5, over the whole width)
    name = "scaling" if _number(getattr(fresh, "scaling", None)) else "scale" if _scaled_sides(origin, "scale") else None
    scaling = getattr(fresh, name, None) if name else None
    passed = _passed_scale(origin) if name is None else None
    if passed is not None:  # no scale of its own: the one its forward passes (TimesFM's 1.0 after its per-column one)
        return passed, f"{origin.__name__} passes scaling={passed:g} to its attention function"
    head_dim = declared_count(fresh, "head_dim") or next(
        (v for s in _HEAD_DIMS if isinstance(v := getattr(fresh, s, None), int)), None) or _head_width(fresh)
    if name is None or not _number(scaling) or not isinstance(head_dim, int):
        return None
    sides = max(_scaled_sides(origin, name), 1)
    if abs(scaling ** sides - head_dim ** -0.5) <= 1e-6 * head_dim ** -0.5:
        return None
    if sides == 2:
        return float(scaling) ** 2, f"{origin.__name__} multiplies its queries and its keys each by {name} = {scaling:g}"
    return float(scaling), f"{origin.__name__} sets {name} = {scaling:g} in its constructor"


def _head_width(fresh: nn.Module) -> int | None:
    """Its width over its heads, when it keeps only those (CvT's width and heads)."""
    heads, width = declared_count(fresh, "num_heads"), declared_count(fresh, "d_in")
    return width // heads if isinstance(width, int) and heads and width % heads == 0 else None


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@per_class
def _scaled_sides(origin: type[nn.Module], name: str) -> int:
    """How many tensors the library's forward assigns a product with its attribute `name` to: 2 when
    it scales its queries and its keys each (OpenAI's privacy filter, by head_dim ** -0.25, and passes
    scaling=1.0), so the scores are scaled by its square; 1 the scores or one side; 0 none."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(origin.forward)))
    except (OSError, TypeError, SyntaxError):
        return 0
    scaled = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
              for target in node.targets if isinstance(target, ast.Name)
              and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and _times(n, name)
                      for n in ast.walk(node.value))}
    return min(len(scaled), 2)


@per_class
def _passed_scale(origin: type[nn.Module]) -> float | None:
    """The number the library's forward passes as `scaling=` to its attention function, when it is a
    literal (TimesFM scales its queries by a learned vector, then passes scaling=1.0); None: none or
    an expression."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(origin.forward)))
    except (OSError, TypeError, SyntaxError):
        return None
    passed = {k.value.value for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords
              if k.arg == "scaling" and isinstance(k.value, ast.Constant) and _number(k.value.value)}
    return float(passed.pop()) if len(passed) == 1 else None


def _times(product: ast.BinOp, name: str) -> bool:
    return any(isinstance(side, ast.Attribute) and side.attr == name for side in (product.left, product.right))


# what a class that scales its scores names: a scale or scaling, a square root, a power of one half, or a
# kernel or attention function that applies its own default scale
_SCALES = re.compile(r"scal(e|es|ing)\b|sqrt|\*\*\s*\(?-?\s*0?\.5|scaled_dot_product|attention_interface|"
                     r"attention_forward|norm_factor|softmax_scale|temperature|_attn_fn|flash|sdpa|MultiheadAttention",
                     re.IGNORECASE)


@per_class
def names_no_scale(origin: type) -> bool:
    """Whether the library's class `origin` names no scale anywhere in its code (comments left out):
    its scores go into the softmax as they are (GPT-Neo's). Read from the library's class, never the
    one attnlab runs, so a copy that adds or drops a scale is still compared with the unscaled one."""
    try:
        code = ast.unparse(ast.parse(inspect.getsource(origin)))
    except (OSError, TypeError, SyntaxError):
        return False
    return _SCALES.search(code) is None


# what a class that computes a softmax names: the call, or a kernel or attention function that computes one
_SOFTMAX = re.compile(r"softmax|scaled_dot_product|attention_interface|attention_forward|flash|sdpa|"
                      r"MultiheadAttention|_attn\b", re.IGNORECASE)


@per_class
def computes_no_softmax(origin: type) -> bool:
    """Whether the library's class `origin`, and the functions and classes of its modeling file it
    calls (YOSO's YosoCumulation), name no softmax: an approximation by design (YOSO's LSH
    expectation), whose weights are not one. Read from the library's class, never the one attnlab
    runs, so a copy that drops the softmax of a softmax class is still found."""
    module = sys.modules.get(origin.__module__)
    try:
        source = inspect.getsource(origin)
        tree = ast.parse(textwrap.dedent(source))
    except (OSError, TypeError, SyntaxError):
        return False
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    helpers = [obj for name in sorted(named) if (inspect.isfunction(obj := vars(module).get(name)) or inspect.isclass(obj))
               and getattr(obj, "__module__", None) == origin.__module__] if module else []
    try:
        texts = [source, *(inspect.getsource(h) for h in helpers)]
    except (OSError, TypeError):
        return False
    return not any(_SOFTMAX.search(_code(text)) for text in texts)


def _code(text: str) -> str:
    """A source's code without its comments (a comment may name the softmax it replaced)."""
    try:
        return ast.unparse(ast.parse(textwrap.dedent(text)))
    except SyntaxError:
        return text


def missing_packages(cls: type) -> list[str]:
    """The optional packages the modeling file of `cls` asks for (`is_natten_available()`) that
    transformers finds missing."""
    import transformers.utils

    source = inspect.getsource(inspect.getmodule(cls) or cls)
    asked = sorted(set(re.findall(r"\bis_(\w+)_available\(", source)))
    return [name for name in asked if not getattr(transformers.utils, f"is_{name}_available", lambda: True)()]
