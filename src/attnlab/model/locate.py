"""Where attention lives in a model, and which layers a run compares.

Attention modules are children named `attn` (nanoGPT's and Hugging Face GPT-2's `transformer.h[i].attn`),
`self_attn` (Llama, Mistral, Qwen, Gemma), `att` (the source's `trf_blocks[i].att`) or `attention`
(GPT-NeoX) of the items of one nn.ModuleList of blocks. Any other layout is named with
`model.attention_path=PREFIX.*.NAME`, `*` standing for the layer index. A wrapper holding the
self-attention beside an `output` (BERT's `BertAttention`: `self`, then `output`'s projection,
residual and LayerNorm) is not the attention: its `self` is, so a swap keeps the residual and norm.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from torch import nn

from attnlab.errors import UserError
from attnlab.modules.families import family_of
from attnlab.modules.hf_find import ATTENTION_SUFFIXES

ATTENTION_NAMES = ("attn", "self_attn", "att", "attention")
_CONTAINERS = (nn.ModuleList, nn.ModuleDict)  # LongCat-Flash's `self_attn` holds two attentions: not one
SELF_IN_WRAPPER = ("self", "attention")  # the self-attention's name inside a wrapper with an `output`
_LAYERED = re.compile(r"^(?P<blocks>.+)\.(?P<index>\d+)\.(?P<name>[A-Za-z_]\w*)$")
# {(blocks, the attention's path inside a block): [(layer index, qualified name, module)]}
Group = dict[tuple[str, str], list[tuple[int, str, nn.Module]]]
# the first index: a block's list; no name: the list's items are the attention (XLM's `attentions`)
_NESTED = re.compile(r"^(?P<blocks>.+?)\.(?P<index>\d+)(?:\.(?P<name>[A-Za-z_][\w.]*))?$")


def attention_modules(model: nn.Module, attention_path: str | None = None, key: str = "model") -> list[tuple[str, nn.Module]]:
    """[(qualified name, module)] of every layer's attention, in layer order: at `attention_path`,
    else where the model's family adapter says (Falcon's `self_attention`), else found by name, else
    by class (an nn.Module whose class name ends in Attention: BLOOM's `self_attention`, CTRL's
    `multi_head_attention`). Where attention sits in several places, the places inside a sub-model
    that does not read token ids (a vision tower: its `main_input_name` is `pixel_values`) are left out."""
    if attention_path is None:
        declared = declared_path(model)
        if declared is not None and any(_path_pattern(declared).match(name) for name, _ in model.named_modules()):
            attention_path = declared
    if attention_path:
        groups = _groups(model, _path_pattern(attention_path), lambda _found, _module: True)
    else:
        groups = _groups(model, _LAYERED, lambda found, module: found["name"] in ATTENTION_NAMES
                         and not isinstance(module, _CONTAINERS)) or \
            _groups(model, _NESTED, lambda _found, module: type(module).__name__.endswith(ATTENTION_SUFFIXES))
    if len(groups) > 1:
        groups = {where: found for where, found in groups.items() if _reads_ids(model, where[0])} or groups
    if len(groups) > 1:
        groups = {where: found for where, found in groups.items() if _beside_embeddings(model, where[0])} or groups
    if len(groups) > 1:
        groups = {where: found for where, found in groups.items() if _in_decoder(model, where[0])} or groups
    if len(groups) != 1:
        raise UserError(_not_found(model, attention_path, key, groups))
    found = [(name, module) for _, name, module in sorted(next(iter(groups.values())), key=lambda item: item[0])]
    return found if attention_path else [_unwrapped(name, module) for name, module in found]


def _groups(model: nn.Module, pattern: re.Pattern[str], wanted: Callable[[re.Match[str], nn.Module], bool]) -> Group:
    """{(blocks, path inside a block): [(index, name, module)]} of the modules `pattern` places in a
    list of blocks and `wanted` takes; in each block the outermost only."""
    groups: Group = {}
    for name, module in model.named_modules():
        found = pattern.match(name)
        if not found or not wanted(found, module):
            continue
        if not isinstance(model.get_submodule(found["blocks"]), (nn.ModuleList, nn.Sequential)):
            continue
        leaf = found["name"] or ""
        inside = [other for other in groups if other[0] == found["blocks"] and leaf.startswith(other[1] + ".")
                  or other[0] == found["blocks"] and other[1] == ""]
        if not inside:
            groups.setdefault((found["blocks"], leaf), []).append((int(found["index"]), name, module))
    return groups


def _beside_embeddings(model: nn.Module, blocks: str) -> bool:
    """`blocks` sits in a module that holds the token embeddings too (Phi-4-multimodal's layers, not
    the audio encoder inside its embedding)."""
    input_embeddings = getattr(model, "get_input_embeddings", None)  # a Hugging Face model's
    embeddings = input_embeddings() if input_embeddings is not None else None
    names = {id(module): name for name, module in model.named_modules()}
    where = names.get(id(embeddings)) if embeddings is not None else None
    parent = blocks.rpartition(".")[0]
    return where is not None and (not parent or where.startswith(parent + "."))


def _in_decoder(model: nn.Module, blocks: str) -> bool:
    """`blocks` is inside the language model transformers' `get_decoder()` names (GOT-OCR2's, beside
    a vision encoder that declares no input of its own)."""
    try:
        get_decoder = getattr(model, "get_decoder", None)  # a Hugging Face model's
        decoder = get_decoder() if get_decoder is not None else None
    except Exception:  # noqa: BLE001 - a model whose get_decoder cannot say: no preference
        return False
    names = {id(module): name for name, module in model.named_modules()}
    where = names.get(id(decoder)) if decoder is not None and decoder is not model else None
    return where is not None and (blocks + ".").startswith(where + ".")


def _reads_ids(model: nn.Module, blocks: str) -> bool:
    """No sub-model on the way to `blocks` declares an input other than token ids."""
    parts = blocks.split(".")
    owners = [model.get_submodule(".".join(parts[:n])) for n in range(1, len(parts))]
    return all(getattr(owner, "main_input_name", "input_ids") == "input_ids" for owner in owners)


def declared_path(model: nn.Module, stack: str | None = None) -> str | None:
    """Where the model's family adapter puts its attention (in `stack`, an encoder–decoder's), as an
    attention path: `transformer.h.*.self_attention`; None where it declares none."""
    row = family_of(model)
    path = row.stacks.get(stack) if stack else row.attention
    return path.replace("{i}", "*") if path else None


def _unwrapped(name: str, module: nn.Module) -> tuple[str, nn.Module]:
    """The self-attention inside a wrapper that adds an `output` after it, else the module itself."""
    children = dict(module.named_children())
    inner = next((child for child in SELF_IN_WRAPPER if child in children), None)
    if inner is None or "output" not in children:
        return name, module
    return f"{name}.{inner}", children[inner]


def _path_pattern(path: str) -> re.Pattern[str]:
    if path.count("*") != 1:
        raise UserError(f"model.attention_path={path}: write it with one * for the layer index, e.g. blocks.*.attn")
    blocks, _, rest = path.partition("*")  # the list of blocks, then the attention's path inside each
    return re.compile(f"^(?P<blocks>{re.escape(blocks.rstrip('.'))})\\.(?P<index>\\d+)(?P<name>{re.escape(rest)})$")


def _not_found(model: nn.Module, attention_path: str | None, key: str, groups: Group) -> str:
    if len(groups) > 1:
        seen = ", ".join(f"{blocks}.*.{leaf}" for blocks, leaf in groups)
        return f"{type(model).__name__}: attention in several places ({seen}); choose one with {key}.attention_path=..."
    children = [name for name, _ in model.named_modules() if name and name.count(".") <= 3][:12]
    where = f"nothing matches {key}.attention_path={attention_path}" if attention_path else "no attention modules found"
    return (f"{type(model).__name__}: {where}; its submodules: {', '.join(children)}, ...; "
            f"point at them with {key}.attention_path=BLOCKS.*.NAME")


def layer_values(layer: Any) -> list[Any]:
    return list(layer) if isinstance(layer, (list, tuple)) else [layer]


def chosen_layers(layer: Any, n_layers: int) -> list[int]:
    """`layer=N`, `layer=all` or `layer=[a,b]` (spelled as attnlab.schema checks) as layer indices;
    none given: layer 0."""
    if layer is None:
        return [0]
    if layer == "all":
        return list(range(n_layers))
    for value in layer_values(layer):
        if isinstance(value, str):
            raise UserError(f"layer={value}: a stack's layer is an encoder–decoder's; this model has one stack: layer=N")
        if value >= n_layers:
            raise UserError(f"layer={value}: the model has {n_layers} layers (0 to {n_layers - 1})")
    return sorted(set(layer_values(layer)))
