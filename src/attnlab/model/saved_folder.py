"""A saved model folder read as data before transformers sees it: no code from it ever runs.

A config.json naming custom code (`auto_map`) or a model type transformers does not ship would make
transformers import a .py from the folder (after asking, on a terminal); both are refused here, before
anything is imported. A safetensors file whose header is corrupt or lies about its size, and a
tokenizer.json without its `added_tokens`, are named here instead of failing deep inside a loader.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from attnlab.errors import UserError
from attnlab.file_limits import check_size
from attnlab.model.model_memory import check_weights_fit
from attnlab.model.model_spec import ModelSpec

CACHE_HINT = "huggingface-cli download {repo} (or: hf download {repo}), once, with a network"
CODE_CONFIGS = ("config.json", "tokenizer_config.json")
HEADER_LIMIT = 100 * 2**20  # safetensors' own limit on a header's size


def saved_source(spec: ModelSpec, model_types: Any) -> str:
    """The folder a saved model's weights are in (`model.path`, or the cached snapshot of `model.hub`,
    never fetched), read as data and its weights sized before anything loads from it."""
    folder = spec.path if spec.kind == "path" and spec.path is not None else _cached_snapshot(spec)
    if not (folder / "config.json").is_file():
        raise UserError(f"{spec.key}.path={folder}: no config.json there (a folder written by save_pretrained)")
    if not list(folder.glob("*.safetensors")):
        pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt*")]
        what = f"only pickled weights ({', '.join(pickled)}), which attnlab never loads" if pickled else "no weights"
        raise UserError(f"{spec.key}.path={folder}: {what}; save them with model.save_pretrained(DIR) "
                        f"(safetensors is its default)")
    where = f"{spec.key}.path={folder}" if spec.kind == "path" else f"{spec.key}.hub={spec.hub}"
    check_saved_folder(folder, where, model_types)
    check_weights_fit(sum(f.stat().st_size for f in folder.glob("*.safetensors")), spec.label)
    return str(folder)


def _cached_snapshot(spec: ModelSpec) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    assert spec.hub is not None  # a saved model that is not model.path: model.hub
    try:
        return Path(snapshot_download(spec.hub, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise UserError(missing(spec, None)) from None


def missing(spec: ModelSpec, exc: OSError | None) -> str:
    """What is missing of a saved model: a hub model not in the cache, or a folder's file."""
    if spec.kind == "hub":
        return (f"{spec.key}.hub={spec.hub}: not in the local Hugging Face cache (attnlab never downloads); "
                f"get it with: {CACHE_HINT.format(repo=spec.hub)}")
    return f"{spec.key}.path={spec.path}: {str(exc).splitlines()[0]}"


def check_saved_folder(folder: Path, where: str, model_types: Any) -> None:
    """Refuse a folder that names custom code, an unknown model type or a corrupt weights/tokenizer file;
    `where` names it in messages (model.path=DIR), `model_types` are the types transformers ships."""
    config = _json(folder / "config.json", where)
    for name in CODE_CONFIGS:
        data = config if name == "config.json" else _json(folder / name, where, optional=True)
        if isinstance(data, dict) and "auto_map" in data:
            raise UserError(f"{where}: {name} names custom code (auto_map), which attnlab never runs; "
                            f"use a model type transformers ships (model_type such as gpt2, llama)")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in model_types:
        raise UserError(f"{where}: config.json has model_type={model_type!r}, not a model type transformers "
                        f"ships; attnlab never runs a folder's own code")
    for weights in sorted(folder.glob("*.safetensors")):
        _check_safetensors(weights, where)
    tokenizer = _json(folder / "tokenizer.json", where, optional=True)
    if tokenizer is not None and not (isinstance(tokenizer, dict) and isinstance(tokenizer.get("added_tokens"), list)):
        raise UserError(f"{where}: tokenizer.json has no 'added_tokens' list; save the tokenizer again with "
                        f"tokenizer.save_pretrained(DIR) or remove tokenizer.json (GPT-2 BPE is then used)")


def _json(file: Path, where: str, optional: bool = False) -> Any:
    if optional and not file.is_file():
        return None
    check_size(file, "tokenizer" if file.name == "tokenizer.json" else "config")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{where}: {file.name} is not readable JSON ({str(exc).splitlines()[0]})") from None


def _check_safetensors(file: Path, where: str) -> None:
    """The header's length, its JSON and every tensor's byte range checked against the file's size."""
    size = file.stat().st_size
    with file.open("rb") as stream:
        head = stream.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        problem = None
        if length < 0 or length > min(HEADER_LIMIT, size - 8):
            problem = "its header length is larger than the file" if length >= 0 else "it is shorter than a header"
        else:
            try:
                header = json.loads(stream.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError):
                header = None
            if not isinstance(header, dict):
                problem = "its header is not JSON"
            else:
                ends = [t.get("data_offsets", [0, 0])[-1] for n, t in header.items() if n != "__metadata__" and isinstance(t, dict)]
                if any(not isinstance(end, int) or end > size - 8 - length for end in ends):
                    problem = "its header names tensors beyond the end of the file"
    if problem:
        raise UserError(f"{where}: {file.name} is not a valid safetensors file ({problem}); save the model again "
                        f"with model.save_pretrained(DIR)")
