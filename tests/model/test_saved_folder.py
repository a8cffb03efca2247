"""A saved folder is read as data: its code never runs, its broken files are named in one line."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from tests.model.test_loading import refused

PAYLOAD = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


def _planted(tiny_gpt2: Path, folder: Path, **config_changes) -> Path:
    """A copy of the tiny GPT-2 with a payload module beside it and config.json changed."""
    shutil.copytree(tiny_gpt2, folder)
    for name in ("modeling_evil.py", "configuration_evil.py"):
        (folder / name).write_text(PAYLOAD.format(marker=str(folder.parent / f"{name}.ran")))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return folder


def test_a_folder_naming_custom_code_is_refused_and_its_code_never_runs(tiny_gpt2, tmp_path) -> None:
    folder = _planted(tiny_gpt2, tmp_path / "evil", auto_map={
        "AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"})
    message = refused(f"model.path={folder}", "layer=0")
    assert "config.json names custom code (auto_map)" in message and "never runs" in message
    assert not list(tmp_path.glob("*.ran"))


def test_an_unknown_model_type_is_refused_before_anything_is_imported(tiny_gpt2, tmp_path) -> None:
    folder = _planted(tiny_gpt2, tmp_path / "evil", model_type="evil")
    assert "config.json has model_type='evil', not a model type transformers ships" in refused(f"model.path={folder}")
    assert not list(tmp_path.glob("*.ran"))


@pytest.mark.parametrize("header", [struct.pack("<Q", 2**40), struct.pack("<Q", 4) + b"nope",
                                    struct.pack("<Q", 2) + b"{x"])
def test_a_corrupt_or_lying_safetensors_header_names_the_file(tiny_gpt2, tmp_path, header) -> None:
    folder = shutil.copytree(tiny_gpt2, tmp_path / "broken")
    (folder / "model.safetensors").write_bytes(header + b"\0" * 64)
    message = refused(f"model.path={folder}", "layer=0")
    assert f"model.path={folder}: model.safetensors is not a valid safetensors file" in message


def test_a_header_naming_bytes_past_the_end_names_the_file(tiny_gpt2, tmp_path) -> None:
    folder = shutil.copytree(tiny_gpt2, tmp_path / "short")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])  # a truncated copy: the header is intact, the data not
    assert "model.safetensors is not a valid safetensors file (its header names tensors beyond the end of the file)" \
        in refused(f"model.path={folder}", "layer=0")


def test_a_tokenizer_json_without_added_tokens_names_the_file_and_key(tiny_gpt2, tmp_path) -> None:
    folder = shutil.copytree(tiny_gpt2, tmp_path / "tok")
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    assert "tokenizer.json has no 'added_tokens' list" in refused(f"model.path={folder}", "layer=0")
