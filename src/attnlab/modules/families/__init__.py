"""Model families as adapters, one file each, in the style of TransformerLens' per-architecture
adapters and timm's model registry.

An adapter (attnlab.modules.families.adapter.Family) says how the family's attention class is
built and called, where it sits in a model, how its projections are named, what the model does
after the stack, and the spellings its config and constructors use for attnlab's keys. A family
without a file falls back to the generic adapter, whose spellings are the ones every lookup reads.
Adding a family is one file beside these and one line in REGISTRY.
"""

from __future__ import annotations

from importlib import import_module

from attnlab.modules.families.adapter import Family
from attnlab.modules.families.docs_table import markdown_table
from attnlab.modules.families.generic import ADAPTER as GENERIC

__all__ = ["FAMILIES", "GENERIC", "Family", "family", "markdown_table", "spellings"]

# the registry: one line per family, its adapter file's name
REGISTRY = (
    "llama",
    "mistral",
    "mixtral",
    "qwen3",
    "olmo",
    "cohere",
    "granite",
    "gemma2",
    "gemma3n_text",
    "llama4_text",
    "deepseek_v3",
    "phi3",
    "gpt2",
    "gpt_bigcode",
    "falcon",
    "mpt",
    "bert",
    "modernbert",
    "deberta_v2",
    "vit",
    "clip_text",
    "t5",
    "longt5",
    "bart",
    "whisper",
    "pytorch",
    "llms_from_scratch",
    "x_transformers",
    "diffusers",
    "timm",
    "smollm3",
)

FAMILIES: tuple[Family, ...] = tuple(import_module(f"{__name__}.{name}").ADAPTER for name in REGISTRY)
_BY_NAME = {name: row for row in FAMILIES for name in (row.name, *row.aliases)}


def family(name: str) -> Family:
    """The adapter of a model type or library, else GENERIC."""
    return _BY_NAME.get(name, GENERIC)


def spellings(key: str, name: str = "") -> tuple[str, ...]:
    """Every spelling of attnlab's `key`, once each: the family `name`'s own first (Falcon's
    num_kv_heads before the num_key_value_heads it derives), then GENERIC's, then the other rows'."""
    rows = [s for f in FAMILIES for s in f.spellings.get(key, ())]
    own = family(name).spellings.get(key, ()) if name else ()
    return tuple(dict.fromkeys([*own, *GENERIC.spellings.get(key, ()), *rows]))
