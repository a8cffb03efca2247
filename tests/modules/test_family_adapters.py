"""Family adapters: every field is read by running code, and the adapters' declared model paths
are where the model keeps its attention (a correct copy there changes nothing)."""

from __future__ import annotations

import ast
import dataclasses
from functools import cache
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.modules.families import Family

SRC = Path(attnlab.__file__).parent
ADAPTERS = SRC / "modules" / "families"


@cache  # all of src parsed once, not once per field
def _attribute_reads() -> frozenset[str]:
    """Attribute names read anywhere in src outside the adapter files (the registry included)."""
    read = set()
    for path in SRC.rglob("*.py"):
        if path.parent == ADAPTERS and path.name != "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                read.add(node.attr)
    return frozenset(read)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Family)])
def test_every_adapter_field_is_read_by_running_code(name):
    assert name in _attribute_reads(), f"Family.{name} is declared but no code outside the adapters reads it"


# strings that spell a family's name or attribute but mean something else where they are written
ELSEWHERE = {"torch": "the library preloaded by name", "gpt2": "tiktoken's encoding", "n_layers": "attnlab's record field",
             "d_model": "the width of attnlab's own training model (training.model.d_model)",
             "timm": "the package's import name (importlib.util.find_spec)",
             "rope_theta": "a key of transformers' own rope_parameters dict, not a config attribute"}


def _code_strings(path: Path) -> set[str]:
    """The string constants and attribute names of a file's code, its docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    strings = {node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs}
    return strings | {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def test_no_module_outside_the_adapters_names_a_family_or_its_attribute_spellings():
    from attnlab.modules.families import FAMILIES, GENERIC

    names = {name for row in FAMILIES for name in (row.name, *row.aliases)}
    # the spellings of other libraries, not attnlab's own keys nor plain words (dim, heads, base, bias)
    spelled = {s for row in (*FAMILIES, GENERIC) for values in row.spellings.values() for s in values}
    spelled -= set(GENERIC.spellings) | {"dim", "heads", "base", "bias", "theta", "dropout", "kv_heads", "d_in"}
    found = {}
    for path in SRC.rglob("*.py"):
        if path.is_relative_to(ADAPTERS) or path.is_relative_to(SRC / "plugins"):  # plugins are attention code
            continue
        named = (_code_strings(path) & (names | spelled)) - set(ELSEWHERE)
        if named:
            found[str(path.relative_to(SRC))] = sorted(named)
    assert found == {}


transformers = pytest.importorskip("transformers")


def test_falcon_s_attention_is_found_where_its_adapter_puts_it_and_a_copy_changes_nothing():
    result = attnlab.run("hf:falcon", overrides=["model=hf:falcon", "model.num_hidden_layers=2", "model.hidden_size=64",
                                                "model.num_attention_heads=4", "inputs=text", "layer=1"])
    assert result.record.status == "ok", result.record.error
    assert result.record.model.attention == "transformer.h.1.self_attention"
    assert result.record.model.effect.kl_max < 1e-6


@dataclasses.dataclass
class ScalarConfig:
    """A config in another library's spelling: the scores scaled by attention_scores_scalar ** -0.5."""

    n_embd: int = 32
    n_head: int = 4
    attention_scores_scalar: float = 64.0


class ScalarAttention(torch.nn.Module):
    def __init__(self, config: ScalarConfig) -> None:
        super().__init__()
        self.n_head, self.scale = config.n_head, config.attention_scores_scalar ** -0.5
        self.c_attn = torch.nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = torch.nn.Linear(config.n_embd, config.n_embd)
        self.config = config

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (part.view(b, t, self.n_head, -1).transpose(1, 2) for part in self.c_attn(x).split(d, dim=2))
        attn_scores = q @ k.transpose(-2, -1)  # (B, nh, T, T)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        attn_weights = torch.softmax((attn_scores * self.scale).masked_fill(causal, float("-inf")), dim=-1)
        context_vec = (attn_weights @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, d)
        return self.c_proj(context_vec)


def test_a_scale_declared_under_another_library_s_spelling_is_named_not_reported_wrong():
    result = attnlab.run(ScalarAttention, overrides=["inputs=random", "inputs.n_tokens=8", "inputs.d_in=32",
                                                     "d_out=32", "num_heads=4"])
    assert result.record.status == "ok", result.record.error
    assert [f.code for f in result.findings if f.severity == "error"] == []
    (declared,) = [f for f in result.findings if f.code == "declared_scale"]
    assert "attention_scores_scalar" in declared.message


VERBATIM = Path(__file__).parent / "verbatim"
SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=32", "d_out=32", "num_heads=4", "dropout=0.0"]


@pytest.mark.parametrize("variant", ["mingpt_attention", "fp32_projection"])
@pytest.mark.slow
def test_verbatim_files_are_registered_and_built_with_no_error_finding(variant, use_plugins):
    """minGPT's GPTConfig(vocab_size, block_size, **kwargs) filled from its class's own reads of it
    (n_embd, n_head); a helper class named only as a default argument leaves the outer class the variant."""
    use_plugins(VERBATIM)
    result = attnlab.run(variant, overrides=SIZES)
    assert result.record.status == "ok", result.record.error
    assert [f.code for f in result.findings if f.severity == "error"] == []


def test_whisper_s_model_runs_its_decoder_with_the_decoder_s_heads():
    """WhisperForCausalLM is the text decoder: its layers' heads are decoder_attention_heads, which its
    config's attribute map would read as the encoder's."""
    sizes = ["model.d_model=64", "model.encoder_attention_heads=4", "model.decoder_attention_heads=2",
             "model.encoder_layers=2", "model.decoder_layers=2", "model.encoder_ffn_dim=64", "model.decoder_ffn_dim=64"]
    result = attnlab.run("hf:whisper", overrides=["model=hf:whisper", *sizes, "inputs=text", "layer=1"])
    assert result.record.status == "ok", result.record.error
    assert result.record.model.attention == "model.decoder.layers.1.self_attn"
    assert result.record.model.heads == 2
    assert result.record.model.effect.kl_max < 1e-6
