"""Model families as adapters, one file each, in the style of TransformerLens' per-architecture
adapters and timm's model registry.

An adapter (attnlab.modules.families.adapter.Family) says how the family's attention class is
built and called, where it sits in a model, how its projections are named, what the model does
after the stack, and the spellings its config and constructors use for attnlab's keys. A family
without a file falls back to the generic adapter, whose spellings are the ones every lookup reads.
Adding a family is one file beside these and one line in FAMILIES (its module imported above it).
"""

from __future__ import annotations

from attnlab.modules.families import (
    bart,
    bert,
    clip_text,
    cohere,
    deberta_v2,
    deepseek_v3,
    diffusers,
    falcon,
    gemma2,
    gemma3n_text,
    gpt2,
    gpt_bigcode,
    granite,
    llama,
    llama4_text,
    llms_from_scratch,
    longt5,
    mistral,
    mixtral,
    modernbert,
    mpt,
    olmo,
    phi3,
    pytorch,
    qwen3,
    smollm3,
    t5,
    timm,
    vit,
    whisper,
    x_transformers,
)
from attnlab.modules.families.adapter import Family
from attnlab.modules.families.docs_table import markdown_table
from attnlab.modules.families.generic import ADAPTER as GENERIC

__all__ = ["FAMILIES", "GENERIC", "Family", "family", "family_of", "markdown_table", "spellings"]

# the registry: one line per family, its adapter (imported above: a line without its import fails ruff)
FAMILIES: tuple[Family, ...] = (
    llama.ADAPTER,
    mistral.ADAPTER,
    mixtral.ADAPTER,
    qwen3.ADAPTER,
    olmo.ADAPTER,
    cohere.ADAPTER,
    granite.ADAPTER,
    gemma2.ADAPTER,
    gemma3n_text.ADAPTER,
    llama4_text.ADAPTER,
    deepseek_v3.ADAPTER,
    phi3.ADAPTER,
    gpt2.ADAPTER,
    gpt_bigcode.ADAPTER,
    falcon.ADAPTER,
    mpt.ADAPTER,
    bert.ADAPTER,
    modernbert.ADAPTER,
    deberta_v2.ADAPTER,
    vit.ADAPTER,
    clip_text.ADAPTER,
    t5.ADAPTER,
    longt5.ADAPTER,
    bart.ADAPTER,
    whisper.ADAPTER,
    pytorch.ADAPTER,
    llms_from_scratch.ADAPTER,
    x_transformers.ADAPTER,
    diffusers.ADAPTER,
    timm.ADAPTER,
    smollm3.ADAPTER,
)
_BY_NAME = {name: row for row in FAMILIES for name in (row.name, *row.aliases)}


def family(name: str) -> Family:
    """The adapter of a model type or library, else GENERIC."""
    return _BY_NAME.get(name, GENERIC)


def family_of(owner: object) -> Family:
    """The adapter of a Hugging Face config (or config class), or of the model or module holding one
    as `.config`, by its `model_type`; GENERIC for anything else."""
    config = getattr(owner, "config", owner)
    return family(getattr(config, "model_type", ""))


def spellings(key: str, name: str = "") -> tuple[str, ...]:
    """Every spelling of attnlab's `key`, once each: the family `name`'s own first (Falcon's
    num_kv_heads before the num_key_value_heads it derives), then GENERIC's, then the other rows'."""
    rows = [s for f in FAMILIES for s in f.spellings.get(key, ())]
    own = family(name).spellings.get(key, ()) if name else ()
    return tuple(dict.fromkeys([*own, *GENERIC.spellings.get(key, ()), *rows]))
