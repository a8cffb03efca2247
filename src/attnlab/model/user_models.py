"""A model class of your own in ./models/NAME.py: the source's `GPTModel(cfg)` or nanoGPT's `GPT(config)`.

./models/ is not a plugin folder, so the file's attention class is never taken for a variant. The
model is the file's outermost nn.Module (the one no other class builds); its config is the file's
config dataclass (nanoGPT's GPTConfig) or a module-level dict holding "vocab_size" (the source's
GPT_CONFIG_124M), with `model.KEY=VALUE` on top. Weights come from a safetensors state_dict.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.model.model_spec import ModelSpec
from attnlab.modules import session
from attnlab.modules.outermost_class import outermost
from attnlab.modules.plugin_import import load_file

MODELS_DIR = "models"


def build_user_model(spec: ModelSpec) -> tuple[nn.Module, Any]:
    """(the model with its weights loaded, its config); an in-memory model (a notebook's) as it is."""
    in_memory = session.model(spec.label)  # a class of your own: its label is its name
    if in_memory is not None:
        return in_memory
    path = Path.cwd() / MODELS_DIR / f"{spec.name}.py"
    if not path.is_file():
        found = sorted(p.stem for p in (Path.cwd() / MODELS_DIR).glob("*.py"))
        raise UserError(f"{spec.key}={spec.name}: no ./{MODELS_DIR}/{spec.name}.py "
                        f"(found: {', '.join(found) or 'none'}); a Hugging Face model is {spec.key}=hf:TYPE")
    try:
        source = load_file(path)
    except Exception as exc:  # noqa: BLE001 - the user's file: its own error, in one line
        raise UserError(f"./{MODELS_DIR}/{path.name}: {type(exc).__name__}: {exc}") from None
    cls = _model_class(source, path)
    config = _config(source, spec, path)
    try:
        module = cls(config)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"{cls.__name__}(config): {type(exc).__name__}: {exc}") from None
    if spec.weights is not None:
        load_weights(module, spec.weights, spec.key)
    return module, config


def _model_class(source: Any, path: Path) -> type[nn.Module]:
    modules = [obj for obj in vars(source).values() if inspect.isclass(obj) and issubclass(obj, nn.Module)]
    classes = [obj for obj in modules if obj.__module__ == source.__name__]
    # a file that only imports its model (`from llms_from_scratch.ch04 import GPTModel`): the one it imports
    classes = classes or [obj for obj in modules if obj is not nn.Module and not obj.__module__.startswith("torch.")]
    models = outermost(classes)
    if len(models) != 1:
        names = ", ".join(c.__name__ for c in models or classes) or "none"
        raise UserError(f"./{MODELS_DIR}/{path.name}: one model class expected, the outermost nn.Module; found {names}")
    return models[0]


def _config(source: Any, spec: ModelSpec, path: Path) -> Any:
    values = vars(source).values()
    dataclass_configs = [obj for obj in values if inspect.isclass(obj) and dataclasses.is_dataclass(obj)
                         and obj.__module__ == source.__name__]
    if dataclass_configs:
        cls = dataclass_configs[0]
        fields = {f.name for f in dataclasses.fields(cls)}
        _known(spec, fields, cls.__name__)
        return cls(**spec.sizes)
    dicts = [obj for obj in values if isinstance(obj, dict) and "vocab_size" in obj]
    if not dicts:
        raise UserError(f"./{MODELS_DIR}/{path.name}: no config: a dataclass (nanoGPT's GPTConfig) or a dict "
                        f"with 'vocab_size' (the source's GPT_CONFIG_124M)")
    _known(spec, set(dicts[0]), "the file's config dict")
    return {**dicts[0], **spec.sizes}


def _known(spec: ModelSpec, fields: set[str], where: str) -> None:
    for key in spec.sizes:
        if key not in fields:
            raise UserError(f"{spec.key}.{key}: not a key of {where} (keys: {', '.join(sorted(fields))})")


def load_weights(module: nn.Module, path: Path, key: str = "model") -> None:
    """A safetensors state_dict (attnlab.model.model_spec refuses any other file), every key matched."""
    if not path.is_file():
        raise UserError(f"{key}.weights={path}: no such file")
    from safetensors.torch import load_file as read_safetensors

    state = read_safetensors(str(path))
    missing, unexpected = _mismatch(module, state)
    if missing or unexpected:
        raise UserError(f"{key}.weights={path}: does not fit the model: missing {missing[:3] or 'none'}, "
                        f"unexpected {unexpected[:3] or 'none'}")
    # strict=False: buffers (causal masks) absent from the file keep their own, a tie its one tensor
    module.load_state_dict(state, strict=False)


def _mismatch(module: nn.Module, state: dict[str, Tensor]) -> tuple[list[str], list[str]]:
    """Parameters with no entry (a tied one counts when any of its names has one), and entries
    that are nothing of the model's (safetensors' save_model drops the second name of a tie)."""
    names: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    params = {name for group in names.values() for name in group}
    buffers = {name for name, _ in module.named_buffers()}
    missing = sorted(group[0] for group in names.values() if not any(n in state for n in group))
    unexpected = sorted(k for k in state if k not in params and k not in buffers)
    return missing, unexpected
