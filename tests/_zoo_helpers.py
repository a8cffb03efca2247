"""Shared helpers for the capture/diagnostics/findings/predictions tests: the engine's flow,
the book's input, and correct variants written in other styles (never compared to themselves)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab
import attnlab.modules.registry
from attnlab.capture.recorder import capture
from attnlab.diagnosis.analysis import analyse
from attnlab.modules.built import as_built, plan
from attnlab.modules.layouts import align
from attnlab.modules.registry import DEFAULT_VALUES, auto_reference
from attnlab.modules.roles import manual_seed
from attnlab.record import Finding

BOOK_INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
     [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]
)


class _Projections(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))


class EinsumAttention(_Projections):
    def forward(self, x):
        queries = torch.einsum("td,de->te", x, self.W_query)
        keys = torch.einsum("td,de->te", x, self.W_key)
        values = torch.einsum("td,de->te", x, self.W_value)
        scores = torch.einsum("ke,qe->qk", keys, queries)  # operands swapped, output still (query, key)
        weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=1)
        return torch.einsum("qk,ke->qe", weights, values)


class ModuleSoftmaxAttention(_Projections):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        values = torch.matmul(x, self.W_value)
        keys = torch.matmul(x, self.W_key)
        queries = torch.matmul(x, self.W_query)
        scores = queries @ keys.mT
        return self.softmax(scores * keys.shape[-1] ** -0.5) @ values


class FunctionalSoftmaxAttention(_Projections):
    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        scores = torch.mm(queries, keys.transpose(0, 1))
        d_k = torch.tensor(keys.shape[-1], dtype=x.dtype)
        return F.softmax(scores / torch.sqrt(d_k), dim=-1) @ values


class TensorMethodAttention(_Projections):
    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        scaled = (queries @ keys.T) * keys.shape[-1] ** -0.5
        return scaled.softmax(-1).matmul(values)


class PrescaledQueriesAttention(_Projections):
    """The 1/sqrt(d_k) applied to the queries before the score product."""

    def forward(self, x):
        keys = x @ self.W_key
        queries = (x @ self.W_query) * keys.shape[-1] ** -0.5
        values = x @ self.W_value
        return torch.softmax(queries @ keys.T, dim=-1) @ values


class PrescaledKeysEinsumAttention(_Projections):
    """The keys divided by sqrt(d_k) before an einsum score product."""

    def forward(self, x):
        queries = x @ self.W_query
        keys = x @ self.W_key / math.sqrt(self.W_key.shape[-1])
        values = x @ self.W_value
        return torch.softmax(torch.einsum("id,jd->ij", queries, keys), dim=-1) @ values


class ManualSoftmaxAttention(_Projections):
    """A hand-written, max-shifted softmax of the scaled scores."""

    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        scaled = queries @ keys.T / keys.shape[-1] ** 0.5
        exp = torch.exp(scaled - scaled.max(dim=-1, keepdim=True).values)
        return (exp / exp.sum(dim=-1, keepdim=True)) @ values


class LogSoftmaxExpAttention(_Projections):
    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        return F.log_softmax(queries @ keys.mT * keys.shape[-1] ** -0.5, dim=-1).exp() @ values


class ConstantAttention(_Projections):
    """Returns a constant: nothing of its pipeline is visible."""

    def forward(self, x):
        return torch.zeros(x.shape[0], self.W_value.shape[1])


CORRECT_STYLES = [EinsumAttention, ModuleSoftmaxAttention, FunctionalSoftmaxAttention, TensorMethodAttention,
                  PrescaledQueriesAttention, PrescaledKeysEinsumAttention, ManualSoftmaxAttention,
                  LogSoftmaxExpAttention]


def _construct(cls_or_name, d_in: int, d_out: int, seed: int, n_tokens: int = 6) -> nn.Module:
    """The module right after torch.manual_seed(seed), as the source (and the engine) builds it;
    a registered variant gets the top-level keys at their defaults (context_length = n_tokens)."""
    if isinstance(cls_or_name, str):
        values = {**DEFAULT_VALUES, "context_length": None, "d_in": d_in, "d_out": d_out, "n_tokens": n_tokens}
        return plan(cls_or_name, values).build(seed).module
    manual_seed(seed)
    return cls_or_name(d_in, d_out)


def build(cls_or_name, d_in: int, d_out: int, seed: int = 123) -> nn.Module:
    """What the engine does with weights=shared for a 2-D module: the reference (SelfAttention_v1)
    built under the seed (the source's three torch.rand draws), its parameters aligned into the module."""
    module = _construct(cls_or_name, d_in, d_out, seed)
    if cls_or_name != "reference":
        align(_construct("reference", d_in, d_out, seed), module, num_heads=1)
    return module


def run_pair(cls_or_name, x: torch.Tensor, d_out: int, seed: int = 123, shared: bool = True):
    """Capture variant and reference as the engine does, then flat diagnostics, first divergence
    and findings. `x` is (n_tokens, d_in); a module that takes batches gets it stacked twice (the
    source's torch.stack((inputs, inputs))); the reference is the variant's declared or `auto` one
    (SelfAttention_v1 for the classes here)."""
    d_in, n_tokens = x.shape[-1], x.shape[-2]
    variant = _construct(cls_or_name, d_in, d_out, seed if shared else seed + 1, n_tokens)
    # the classes here are written for (n_tokens, d_in), as SelfAttention_v1 is; a registered variant is probed
    variant_batched = isinstance(cls_or_name, str) and as_built(variant).takes_batches(d_in, n_tokens, d_out)
    name = (auto_reference(attnlab.modules.registry.get_variant(cls_or_name), variant, variant_batched)
            if isinstance(cls_or_name, str) else "reference")
    reference = _construct(name, d_in, d_out, seed, n_tokens)
    reference_batched = as_built(reference).takes_batches(d_in, n_tokens, d_out)
    if shared:
        values = {**DEFAULT_VALUES, "d_in": d_in, "d_out": d_out, "n_tokens": n_tokens}
        align(reference, variant, num_heads=plan(name, values).num_heads)
    batch = torch.stack((x, x))  # (2, n_tokens, d_in)
    variant.eval(), reference.eval()
    v = capture(variant, batch if variant_batched else x)
    r = capture(reference, batch if reference_batched else x)
    found = analyse(v, r, weights_shared=shared)
    return v, r, found.diagnostics, found.first_divergent_stage, found.findings


DELIBERATE = {"kv_heads", "rotary", "position_bias", "window", "softcap", "qk_norm"}  # info notes, not bugs


def zoo_specs():
    """The bug zoo checked on the book's (n_tokens, d_in) input: every variant that declares the
    finding it must trigger, but the multi-head zoo (tag multi_head), which needs distinct batch
    items and is checked in tests/diagnosis/test_findings_multi_head.py, and the deliberate changes (gqa,
    rope, ...: info notes), checked in tests/plugins/test_modern_variants.py and tests/plugins/test_verdicts.py."""
    registry = attnlab.modules.registry.discover()
    multi_head = set(attnlab.list_variants(tag="multi_head"))
    return [s for s in registry.specs.values() if s.expected_finding and s.name not in multi_head
            and s.expected_finding[0] not in DELIBERATE]


def multi_head_zoo_specs():
    """The multi-head bug zoo: the plugins tagged multi_head (copies of CausalAttention,
    MultiHeadAttention and the notebook's wrapper, each with one mistake)."""
    registry = attnlab.modules.registry.discover()
    return [registry.specs[name] for name in attnlab.list_variants(tag="multi_head")]


def codes(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.stage) for f in findings]


__all__ = ["BOOK_INPUTS", "CORRECT_STYLES", "ConstantAttention", "build", "codes", "multi_head_zoo_specs", "run_pair",
           "zoo_specs"]


def source_qkv(seed: int, d_in: int, d_out: int, init: str = "rand") -> tuple[torch.Tensor, ...]:
    """The source's protocol, written out: torch.manual_seed(seed), then W_query, W_key, W_value as
    three torch.rand(d_in, d_out) draws (init="normal": torch.randn / sqrt(d_in), same order)."""
    torch.manual_seed(seed)
    draw = (lambda: torch.randn(d_in, d_out) / d_in**0.5) if init == "normal" else (lambda: torch.rand(d_in, d_out))
    return draw(), draw(), draw()


def plugin_runner(folder: Path, plugins: dict[str, str], header: str, use_plugins, tokens: list[str], **sizes):
    """Write each plugin body (after `header`) into `folder`, use the folder, and return a run of a
    plugin by name with `+variant.params.KEY=VALUE` params, checked to end ok."""
    import textwrap

    import attnlab

    folder.mkdir()
    for name, body in plugins.items():
        (folder / f"{name}.py").write_text(header + textwrap.dedent(body))
    use_plugins(folder)

    def run(name: str, *params: str):
        result = attnlab.run(name, overrides=[*tokens, *(f"+variant.params.{p}" for p in params)], **sizes)
        assert result.record.status == "ok", result.record.error
        return result

    return run
