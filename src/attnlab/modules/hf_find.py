"""Finding a model type's attention the way transformers organises it.

A type's modeling module is the one beside its config class (`configuration_x` -> `modeling_x`),
never guessed from the type's name (`data2vec-audio`'s config lives in
`data2vec/configuration_data2vec_audio.py`, its classes in `modeling_data2vec_audio.py`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from torch import nn

from attnlab.modules.class_cache import per_class
from attnlab.modules.roles import projection_role

if TYPE_CHECKING:  # for its type only: attnlab imports transformers on first use
    from transformers import PretrainedConfig

ATTENTION_SUFFIXES = ("SelfAttention", "Attention")


def config_class_of(model_type: str) -> type:
    """transformers' config class of `model_type` (KeyError: no such type)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]


def modeling_module(config_cls: type) -> ModuleType | None:
    """The modeling module beside a config class's own module, None where there is none (a
    tokenizer-only type, a config without a PyTorch model)."""
    package, _, name = config_cls.__module__.rpartition(".")
    if not name.startswith("configuration_"):
        return None
    try:
        return importlib.import_module(f"{package}.modeling_{name.removeprefix('configuration_')}")
    except ImportError:  # no modeling file (gpt-sw3's tokenizer type), or one needing a library not installed
        return None


def attention_classes(modeling: ModuleType) -> list[type[nn.Module]]:
    """The nn.Module classes a modeling module defines whose names end in Attention/SelfAttention,
    in the module's own order."""
    return [obj for name, obj in vars(modeling).items()
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == modeling.__name__
            and name.endswith(ATTENTION_SUFFIXES)]


@dataclass(frozen=True)
class Call:
    """Where a class of the modeling module builds `target`: the caller class, its `__init__`'s
    syntax tree and the call expression (`self.attn = GPTNeoAttention(config, layer_id)`)."""

    caller: type
    init: ast.FunctionDef
    node: ast.Call
    attribute: str  # the attribute the result is assigned to (`attn`), "" when not assigned to one


def calls_of(modeling: ModuleType, target: type) -> list[Call]:
    """Every call of `target` in the `__init__` of a class the modeling module defines, in source
    order: by its name, or through a dict of classes (`GPT_NEO_ATTENTION_CLASSES[impl](...)`)."""
    dispatch = {name for name, value in vars(modeling).items()
                if isinstance(value, dict) and any(v is target for v in value.values())}
    found = []
    for cls in _module_classes(modeling):
        init = _init_tree(cls)
        if init is None:
            continue
        for node in ast.walk(init):
            if isinstance(node, ast.Call) and _calls(node.func, target.__name__, dispatch):
                found.append(Call(cls, init, node, _assigned_to(init, node)))
    return found


def _calls(func: ast.expr, name: str, dispatch: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id == name
    if isinstance(func, ast.Attribute):
        return func.attr == name
    return isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in dispatch


def _assigned_to(init: ast.FunctionDef, call: ast.Call) -> str:
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and call in list(ast.walk(node.value)):
            target = node.targets[0]
            return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return ""


def _module_classes(modeling: ModuleType) -> list[type]:
    return [obj for obj in vars(modeling).values()
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == modeling.__name__]


@per_class
def _init_tree(cls: type) -> ast.FunctionDef | None:
    """The syntax tree of the class's own `__init__`, None where it has none or no source."""
    return _function_tree(vars(cls).get("__init__"))


def _function_tree(function: object) -> ast.FunctionDef | None:
    function = getattr(function, "__wrapped__", function)  # transformers wraps some constructors
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    except (TypeError, OSError, SyntaxError):
        return None
    function = tree.body[0] if tree.body else None
    return function if isinstance(function, ast.FunctionDef) else None


_CROSS = ("cross", "encoder_attn", "enc_dec")


def self_attention_call(call: Call) -> bool:
    """Not a cross-attention: neither assigned to a cross-attention's attribute nor built with
    `is_cross_attention=True`."""
    if any(word in call.attribute.lower() for word in _CROSS):
        return False
    return not any(k.arg in ("is_cross_attention", "cross_attention") and isinstance(k.value, ast.Constant)
                   and k.value.value for k in call.node.keywords)


def model_class(modeling: ModuleType, config_cls: type, mapped: str | None = None) -> type | None:
    """The model class of the module built from `config_cls`: the one transformers maps the type
    to, else the shortest-named `...Model` whose `config_class` it is (CLIPTextModel for CLIPTextConfig),
    else any such class (Emu3VQVAE)."""
    own = [c for c in _module_classes(modeling) if getattr(c, "config_class", None) is config_cls]
    named = [c for c in own if c.__name__ == mapped]
    models = sorted((c for c in own if "PreTrained" not in c.__name__),  # a `...Model` first, else Emu3VQVAE
                    key=lambda c: (not c.__name__.endswith("Model"), len(c.__name__)))
    return next(iter(named or models), None)


def reachable(modeling: ModuleType, root: type) -> set[type]:
    """The module's classes `root` builds, directly or through the classes it builds (a model's
    encoder, its layers, their attention), read off each `__init__` by name."""
    by_name = {c.__name__: c for c in _module_classes(modeling)}
    seen, todo = {root}, [root]
    while todo:
        names = _built_names(todo.pop())
        names |= {d for n in names for d in _dispatched(modeling, n)}
        for cls in (by_name[n] for n in names if n in by_name):
            if cls not in seen:
                seen.add(cls)
                todo.append(cls)
    return seen


def _built_names(cls: type) -> set[str]:
    """The names `cls.__init__` reads, and those of the methods it calls on itself to build its
    parts (Zamba2Model's `self.layers = self.get_layers()`)."""
    init = _init_tree(cls)
    if init is None:
        return set()
    names = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)}
    helpers = {n.func.attr for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}
    for method in (vars(cls).get(h) for h in helpers):
        tree = _function_tree(method) if inspect.isfunction(method) else None
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} if tree is not None else set()
    return names


def _dispatched(modeling: ModuleType, name: str) -> list[str]:
    """The class names a module-level dict of classes holds (GPT_NEO_ATTENTION_CLASSES)."""
    value = vars(modeling).get(name)
    return [v.__name__ for v in value.values() if inspect.isclass(v)] if isinstance(value, dict) else []


def choose(modeling: ModuleType, base_name: str = "", within: set[type] | None = None) -> type[nn.Module] | None:
    """The self-attention class of a modeling module, as its layers build it: of the attention
    classes the module defines, the ones another class instantiates as a self-attention (a layer's,
    a block's), descended into the self-attention a wrapper builds (BERT's BertAttention ->
    BertSelfAttention); among them `<base>SelfAttention` / `<base>Attention` first, then the one
    a `...Layer`/`...Block` builds first. Without any call: the names alone."""
    classes = [c for c in attention_classes(modeling) if within is None or c in within]
    used = []
    for cls in classes:
        calls = [c for c in calls_of(modeling, cls) if c.caller not in classes and self_attention_call(c)]
        if calls:
            layered = any(c.caller.__name__.endswith(("Layer", "Block")) for c in calls)
            used.append((not layered, cls))
    ordered = [_descend(modeling, cls, classes) for _, cls in sorted(used, key=lambda u: u[0])]
    named = [c for c in _by_name(classes, base_name) if c in ordered]
    if named or ordered:
        return (named or ordered)[0]
    return next(iter(_by_name(classes, base_name)), None) or next(
        (c for c in classes if not any(w in c.__name__.lower() for w in ("cross",))), None)


def _descend(modeling: ModuleType, cls: type, classes: list[type]) -> type:
    """The attention a wrapper builds inside itself (BertAttention's BertSelfAttention), as deep as it goes."""
    for _ in range(3):
        init = _init_tree(cls)
        if _projects_queries_and_keys(init):  # the attention itself: what it builds inside is a part (NeoMME's
            return cls  # exclusive self-attention, applied to its output)
        named = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)} if init is not None else set()
        named |= {d for n in named for d in _dispatched(modeling, n)}
        # called, or chosen by name (BertAttention's `BertCrossAttention if is_cross_attention else BertSelfAttention`)
        # a class with no constructor of its own holds nothing: a kernel the wrapper calls (Deformable DETR's
        # MultiScaleDeformableAttention), not the attention it wraps
        inner = [c for c in classes if c is not cls and c.__name__ in named and "cross" not in c.__name__.lower()
                 and _constructs(c)]
        if not inner:
            return cls
        cls = next((c for c in inner if c.__name__.endswith("SelfAttention")), inner[0])
    return cls


def _projects_queries_and_keys(init: ast.FunctionDef | None) -> bool:
    """Whether a constructor assigns a query and a key projection of its own (`self.q_proj = ...`)."""
    assigned = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute)} if init is not None else set()
    return {"queries", "keys"} <= {projection_role(name) for name in assigned}


def _constructs(cls: type) -> bool:
    """A constructor of its own or of a class it derives from, below nn.Module."""
    return any("__init__" in vars(k) for k in cls.__mro__ if k is not nn.Module and issubclass(k, nn.Module))


def _by_name(classes: list[type], base_name: str) -> list[type]:
    """`<base>SelfAttention` then `<base>Attention`, for the base name and its shorter prefixes."""
    by_name = {c.__name__: c for c in classes}
    return [by_name[p + s] for p in _prefixes(base_name) for s in ATTENTION_SUFFIXES if p + s in by_name]


def _prefixes(base: str) -> list[str]:
    """`Gemma3Text` -> [`Gemma3Text`, `Gemma3`]: the base name without its trailing words."""
    found = [base]
    while any(c.isupper() for c in base[1:]):
        base = base[: max(i for i, c in enumerate(base) if c.isupper() and i > 0)]
        found.append(base)
    return [p for p in found if p]


@dataclass(frozen=True)
class Found:
    """A model type's attention class, the config class it is built from, and a note naming what
    else the type holds (a composite's other towers)."""

    module_cls: type[nn.Module]
    config_cls: type
    note: str = ""


class NotFound(LookupError):
    """No attention class for the type: the reason, in one line."""


class ChannelsFirst(NotFound):
    """The type's attention is a convolutional block over a feature map, not over token rows: the reason."""


def _projection_kind(cls: type) -> str | None:
    """What the class's own `__init__` builds its projections from, where it takes a config and builds
    "Linear" layers, or builds "Conv2d" ones (a VQ-GAN's attention block over a feature map); else None."""
    init = _init_tree(cls)
    if init is None:
        return None
    built = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(init) if isinstance(n, ast.Call)}
    takes_config = any(a.arg in ("config", "cfg") for a in init.args.args[1:2])
    return "Linear" if "Linear" in built and takes_config else ("Conv2d" if "Conv2d" in built else None)


def find(model_type: str, named: str | None = None, d_in_spellings: tuple[str, ...] = ()) -> Found:
    """The attention class of a model type: a type's own from the modeling module beside its config
    class (else the module of the model class transformers maps it to), a composite's text tower
    (its others named); `named`: its family adapter's class."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    text = getattr(config_cls, "sub_configs", {}).get("text_config")
    if text is not None and model_type + "_text" in CONFIG_MAPPING:
        return find(model_type + "_text", named, d_in_spellings)
    return _in_config(model_type, config_cls, named, d_in_spellings)


def _in_config(model_type: str, config_cls: type, named: str | None, d_in_spellings: tuple[str, ...],
               depth: int = 0) -> Found:
    towers = _towers(config_cls) if depth < 3 else {}
    if towers and not _sized(config_cls, d_in_spellings):
        try:
            return _tower(model_type, towers, d_in_spellings, depth)
        except NotFound:  # towers without attention around a model that has its own (PP-OCRv5's head)
            return _own(model_type, config_cls, named)
    try:
        return _own(model_type, config_cls, named)
    except NotFound as own:
        if not towers:
            raise
        try:
            return _tower(model_type, towers, d_in_spellings, depth)
        except NotFound:
            raise own from None  # the model's own reason: its towers add none


def _towers(config_cls: type) -> dict[str, type[PretrainedConfig]]:
    """A config's sub-configs by key, each its concrete class (an `AutoConfig` entry: the class of
    the default config's value)."""
    from transformers import PretrainedConfig

    subs = dict(getattr(config_cls, "sub_configs", {}) or {})
    try:
        default = config_cls()
    except Exception:  # noqa: BLE001 - a config that cannot be built bare: its declared classes only
        default = None
    # a config it holds without declaring it (Mimi's encoder_config, built by AutoModel.from_config)
    held = {k: None for k in dir(default) if k.endswith("_config") and not k.startswith("_")} if default else {}
    subs |= {k: type(v) for k in held if k not in subs and hasattr(v := getattr(default, k, None), "model_type")
             and hasattr(v, "to_dict")}
    if not subs:
        return {}
    found = {}
    for key, sub in subs.items():
        value = getattr(default, key, None)
        concrete = type(value) if value is not None and hasattr(value, "model_type") else sub
        if isinstance(concrete, type) and issubclass(concrete, PretrainedConfig) and concrete.model_type:
            found[key] = concrete
    return found


def _sized(config_cls: type, d_in_spellings: tuple[str, ...]) -> bool:
    """Whether the config holds a model width itself (a composite's does not)."""
    try:
        config = config_cls()
    except Exception:  # noqa: BLE001 - a config that cannot be built bare holds no width we can read
        return False
    return any(hasattr(config, s) for s in d_in_spellings)


def _tower(model_type: str, towers: dict[str, type[PretrainedConfig]], d_in_spellings: tuple[str, ...], depth: int) -> Found:
    """A composite's text tower by default (else its first tower with attention), the others named."""
    ranked = sorted(towers.items(), key=lambda t: t[0] != "text_config")
    for key, sub in ranked:
        try:
            found = _in_config(sub.model_type, sub, None, d_in_spellings, depth + 1)
        except NotFound:
            continue
        others = ", ".join(f"hf:{s.model_type}" for s in towers.values() if s is not sub)
        note = f"{model_type} is a composite: its {key.removesuffix('_config')} tower" + (
            f"; the others: {others}" if others else "")
        return Found(found.module_cls, found.config_cls, found.note or note)
    raise NotFound(f"a composite config whose towers ({', '.join(towers)}) hold no attention class")


def _own(model_type: str, config_cls: type, named: str | None) -> Found:
    modeling = modeling_module(config_cls) or _mapped_module(model_type)
    if modeling is None:
        raise NotFound(f"transformers has no modeling module beside {config_cls.__module__} (no PyTorch model)")
    if named and inspect.isclass(getattr(modeling, named, None)):
        return Found(getattr(modeling, named), config_cls)
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    mapped = MODEL_MAPPING_NAMES.get(model_type)
    mapped = mapped if isinstance(mapped, str) else None
    root = model_class(modeling, config_cls, mapped)
    if root is None:  # BLIP's text model: its config beside modeling_blip.py, its model in modeling_blip_text.py
        modeling, root = next(((m, r) for m in _package_modules(config_cls)
                               if (r := model_class(m, config_cls, mapped)) is not None), (modeling, None))
    base = _base_name(model_type, config_cls)
    if root is None:
        chosen = choose(modeling, base)
        if chosen is None:
            raise NotFound(f"{modeling.__name__} defines no attention class (no nn.Module named ...Attention)")
        return Found(chosen, config_cls)
    # the attention of this config's own model (ALIGN's vision tower builds none of the text tower's classes),
    # else of its task models (PP-OCRv5's base model is a backbone, its recognition head holds the attention)
    built: set[type] = set()
    for model in (root, *_task_models(modeling, config_cls, root)):
        built |= reachable(modeling, model)
        chosen = choose(modeling, base, built)
        if chosen is not None:
            return Found(chosen, config_cls)
    attention_named = sorted(c.__name__ for c in built if _ATTENTION_WORDS.search(c.__name__))
    by_projection = {_projection_kind(c): c for c in sorted(built, key=lambda c: c.__name__, reverse=True)
                     if c.__name__ in attention_named}
    if "Linear" in by_projection:  # token attention under another name (Emu3's VQ-VAE Emu3VQVAEAttentionBlock)
        return Found(by_projection["Linear"], config_cls)
    if "Conv2d" in by_projection:
        raise ChannelsFirst(f"{root.__name__} builds {by_projection['Conv2d'].__name__}, a convolutional attention "
                            "block over a (batch, channels, height, width) feature map (1x1-convolution queries, keys "
                            "and values inside its own norm and residual); attnlab runs attention over (batch, tokens, "
                            "d_in) rows, so it is not run")
    if attention_named:
        raise NotFound(f"{root.__name__} builds no attention class attnlab runs (no nn.Module named ...Attention; it "
                       f"builds {', '.join(attention_named)})")
    raise NotFound(f"{root.__name__} builds no attention module: {NO_ATTENTION}")


# said of a type whose model builds no attention at all (a convolutional network, a vocoder, a state-space
# model): not a class attnlab failed to find, so the survey counts it apart (attnlab.conformance.survey)
NO_ATTENTION = "a model without attention"
_ATTENTION_WORDS = re.compile(r"attn|attention", re.IGNORECASE)


def _task_models(modeling: ModuleType, config_cls: type, root: type) -> list[type]:
    """The module's other models built from `config_cls` (its `...For...` heads), shortest name first."""
    own = [c for c in _module_classes(modeling) if getattr(c, "config_class", None) is config_cls
           and c is not root and "PreTrained" not in c.__name__]
    return sorted(own, key=lambda c: len(c.__name__))


def _package_modules(config_cls: type) -> list[ModuleType]:
    """The other modeling modules of the config's package (`blip/modeling_blip_text.py`)."""
    package = config_cls.__module__.rpartition(".")[0]
    try:
        folder = importlib.import_module(package).__path__
    except (ImportError, AttributeError):
        return []
    found = []
    for info in pkgutil.iter_modules(folder):
        if info.name.startswith("modeling_") and not info.name.startswith(("modeling_tf_", "modeling_flax_")):
            try:
                found.append(importlib.import_module(f"{package}.{info.name}"))
            except ImportError:  # a module needing a library not installed
                continue
    return found


def _mapped_module(model_type: str) -> ModuleType | None:
    """The module of the model class transformers' own mapping names for the type (LayoutXLM's
    LayoutLMv2Model), where no modeling file sits beside its config."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    try:
        cls = getattr(transformers, name) if isinstance(name, str) else None
    except (AttributeError, ImportError):
        return None
    return sys.modules.get(cls.__module__) if cls is not None else None


def _base_name(model_type: str, config_cls: type) -> str:
    """The model's class name without `Model` (`Gemma3Text`), else its config's without `Config`."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    base = MODEL_MAPPING_NAMES.get(model_type)
    return str(base).removesuffix("Model") if isinstance(base, str) else config_cls.__name__.removesuffix("Config")
