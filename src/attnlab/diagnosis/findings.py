"""The diagnosis: which stage went wrong first, and why, in words a learner understands.

Checks follow the source's order for locating a problem (query source, key index, scaling,
softmax axis), then the value path and the context. Two kinds of check:

- self-consistent ones read only the variant (its sources, scaling factor, weight sums,
  shapes, its own batched-vs-single-token agreement) and always run;
- comparisons with the reference run only with shared weights, and only until a finding
  explains a divergence: a wrong early stage makes every later one wrong, and reporting those
  consequences would bury the root cause.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from attnlab.diagnosis.batch_mixing import BatchMixing
from attnlab.capture.recorder import Capture
from attnlab.diagnosis.diagnostics import blocks, capture_eps, max_abs, stage_differs, stage_tolerance
from attnlab.diagnosis.head_findings import MASK_CODES, HeadChecks, heads_phrase
from attnlab.diagnosis.recognisers import recognise
from attnlab.record import Finding
from attnlab.capture.spill import release
from attnlab.capture.stages import STAGES

_PROJECTIONS = {"queries": "W_query", "keys": "W_key", "values": "W_value"}
_SCALE_RTOL = 1e-3


def _fmt(x: float) -> str:
    return str(round(x, 4))


class _Diagnosis(HeadChecks):
    def __init__(self, variant: Capture, reference: Capture, diagnostics: dict[str, float], weights_shared: bool,
                 train: bool = False, mixing: BatchMixing | None = None):
        self.v, self.ref, self.d = variant, reference, diagnostics
        self.shared = weights_shared
        self.train, self.mixing = train, mixing
        self.findings: list[Finding] = []
        self.explained = False  # a finding already explains why later stages differ
        self.unjudged_from = len(STAGES)  # stages from this index on differ for a known reason (dropout, batch mixing)
        self.ref_mask: torch.Tensor | None = None

    def add(self, code: str, stage: str, message: str, *, explains: bool = True, severity: str = "error",
            heads: list[int] | None = None, batch: list[int] | None = None) -> None:
        self.findings.append(Finding(code, stage, severity, message, heads, batch))
        self.explained = self.explained or explains
        if code == "batch_mixing":
            self.unjudged_from = min(self.unjudged_from, STAGES.index(stage))

    def judged(self, stage: str) -> bool:
        """Whether a difference at this stage can be a finding of its own (not dropout's chance or
        batch mixing's consequence)."""
        return STAGES.index(stage) < self.unjudged_from

    def present(self, *stages: str) -> bool:
        return all(s in self.v.stages for s in stages)

    def compare(self, stage: str) -> bool:
        """Whether a comparison with the reference may judge this stage."""
        return (self.shared and not self.explained and self.judged(stage) and self.present(stage)
                and stage in self.ref.stages)

    def differs(self, stage: str, other: torch.Tensor | None = None) -> bool:
        return stage_differs(stage, self.v, self.ref, other, diff=self.d.get(f"divergence_{stage}"))

    def after(self, check: Callable[..., Any], *args: Any) -> Any:
        """Run one check, then give back the pages it read of stages spilled to disk."""
        try:
            return check(*args)
        finally:
            release(self.v, self.ref)

    def run(self) -> list[Finding]:
        self.masked = self.after(self.mask_counts)
        for found in self.after(recognise, self.v, self.ref, self.d):  # deliberate changes (RoPE, a window) first
            self.add(found.code, found.stage, found.message, severity=found.severity)
        if self.train and ("weights_applied" in self.v.stages or "weights_applied" in self.v.missing
                           or "weights_applied" in self.ref.stages):
            self.unjudged_from = STAGES.index("weights_applied")  # dropout draws differ: chance, not a bug
        self.after(self.mask_shape)
        self.after(self.non_finite)
        self.after(self.shapes)
        self.after(self.head_split)
        self.after(self.kv_heads)
        self.after(self.batch_mixing_gate)
        swapped = self.after(self.scores_transposed)
        if not swapped:
            self.after(self.query_source)
            self.after(self.key_index)
        if swapped:
            self.add("scores_transposed", "scores", swapped)
        self.after(self.mask)
        self.after(self.scaling)
        self.after(self.softmax)
        self.after(self.dropout)
        self.after(self.value_path)
        self.after(self.output)
        self.after(self.batched_single)
        self.after(self.batch_mixing)
        self.after(self.precision)
        order = {s: i for i, s in enumerate(STAGES)}
        located = [self.after(self.locate, f) for f in self.findings]
        return sorted(located, key=lambda f: (order[f.stage], f.severity != "error"))  # a bug before a note

    def batch_mixing_gate(self) -> None:
        """Comparisons from the stage where batch items mix on are its consequences."""
        if self.mixing is not None and self.mixing.stage is not None:
            self.unjudged_from = min(self.unjudged_from, STAGES.index(self.mixing.stage))

    def mask_counts(self) -> dict[str, int]:
        """-inf entries of the scores and the softmax input that are a mask (e.g. causal), by stage.

        A mask is -inf in the softmax input where the weights are exactly 0, with no NaN or +inf
        anywhere in it and finite weights; anything else with -inf stays a non_finite finding.
        """
        scaled, weights = self.v.stages.get("scaled_scores"), self.v.stages.get("weights")
        if scaled is None or weights is None or scaled.shape != weights.shape or scaled.numel() == 0:
            return {}
        lo, hi = (float(v) for v in torch.aminmax(scaled))  # one pass: NaN shows in both, +inf in hi
        if lo != -math.inf or math.isnan(hi) or hi == math.inf or not math.isfinite(max_abs(weights)):
            return {}
        count = 0
        for i in blocks(scaled):  # a (rows, key) block at a time: no stage-sized temporaries
            masked = torch.isneginf(scaled[i])
            if bool(torch.where(masked, weights[i], 0.0).any()):
                return {}
            count += int(masked.sum())
        counts = {"scaled_scores": count}
        scores = self.v.stages.get("scores")
        if scores is not None and scores.shape == scaled.shape and self.d.get("non_finite_scores", 0) > 0:
            counts["scores"] = sum(int(torch.isneginf(scores[i]).sum()) for i in blocks(scores))
        return counts

    def mask(self) -> None:
        if not self.masked:
            return
        if self.ref_masked():
            return  # the reference masks too: a mask difference shows as a divergence, not as a note
        scaled = self.v.stages["scaled_scores"]
        n_rows, n_keys = scaled.shape[-2:]
        causal = torch.ones(n_rows, n_keys, dtype=torch.bool, device=scaled.device).triu(1)
        kind = ("a causal mask (every key after its query)" if
                torch.equal(torch.isneginf(scaled), causal.expand_as(scaled)) else "a mask")
        self.add("masked", "scaled_scores", f"{self.masked['scaled_scores']} of the {scaled.numel()} scaled_scores "
                 f"are -inf: {kind}, so those attention weights are 0 and each row still sums to 1; the reference "
                 f"has no mask, so the weights and the context differ from the reference from here on.",
                 severity="info")

    def ref_masked(self) -> bool:
        if self.ref_mask is not None:
            return True  # mask_shape found the reference's mask
        scaled = self.ref.stages.get("scaled_scores")
        return scaled is not None and not math.isfinite(max_abs(scaled)) and bool(torch.isneginf(scaled).any())

    def non_finite(self) -> None:
        if self.v.softmax_axis in (0, 1, 2) or any(f.code == "mask_offset" for f in self.findings):
            return  # a softmax over another axis, or a mask that hides a whole row, explains the NaN
        for stage in STAGES:
            count = self.d.get(f"non_finite_{stage}", math.nan) - self.masked.get(stage, 0)
            values = self.v.stages.get(stage)
            if count > 0 and stage in ("scores", "scaled_scores") and values is not None:
                blind = torch.isneginf(values).all(dim=-1).nonzero().tolist()  # [[batch, head, row], ...]
                if blind:
                    self.add("non_finite", stage, f"row {blind[0][-1]} of {stage} is -inf for every key (a mask that "
                             f"hides all keys from that query), so its softmax is 0/0 = NaN; a query must keep "
                             f"at least one key (a causal mask keeps its own token).")
                    return
            if count > 0:
                self.add("non_finite", stage, f"{stage} holds {int(count)} NaN/inf values where finite numbers "
                         f"were expected; look at the line that computes {stage}.")
                return

    def shapes(self) -> None:
        d_in = self.v.stages["inputs"].shape[-1]
        undivided = []
        for stage, matrix in _PROJECTIONS.items():
            if not self.present(stage) or stage not in self.ref.stages:
                continue
            cols, expected = self.v.stages[stage].shape[-1], self.ref.stages[stage].shape[-1]
            if cols == expected:
                continue
            cause = "d_in" if cols == d_in else f"{cols}"
            heads = self.ref.stages[stage].shape[1]
            per_head = heads > 1
            wanted = f"head_dim={expected} per head" if per_head else f"d_out={expected}"
            if per_head and cols == heads * expected:  # the wrapper's heads built with d_out each
                undivided.append((stage, cols, expected))
                continue
            self.add("shape_projection", stage, f"{stage} have {cols} columns where {wanted} was expected: "
                     f"the {matrix} projection probably used {cause} where it should have used "
                     f"{'d_out // num_heads' if per_head else 'd_out'}.")
        if undivided:
            self.undivided_heads(undivided)

    def undivided_heads(self, undivided: list[tuple[str, int, int]]) -> None:
        """Every head built with the whole d_out: one finding, where the learner sees it (the output's
        width) when that differs, else at the first projection."""
        stages = ", ".join(stage for stage, _, _ in undivided)
        _, cols, expected = undivided[0]
        width, ref_width = self.v.stages["output"].shape[-1], self.ref.stages["output"].shape[-1]
        heads = f"each head's {stages} have {cols} columns where head_dim={expected} per head was expected"
        cause = f"every head got the full d_out={cols} instead of d_out // num_heads; give each head d_out // num_heads."
        if width == ref_width:  # an output projection took the merged heads back to d_out
            self.add("shape_projection", undivided[0][0], f"{heads}: {cause}")
            return
        self.add("shape_projection", "output", f"the output has {width} columns where the reference has d_out="
                 f"{ref_width} (num_heads·d_out): {heads}, because {cause}")

    def scores_transposed(self) -> str | None:
        """keys @ queries.T: the roles are swapped, or the scores equal the reference's transposed."""
        by_sources = self.v.score_roles == ("keys", "queries")
        scores = self.v.stages.get("scores")
        by_values = (self.compare("scores") and self.differs("scores")
                     and not self.differs("scores", scores.mT))
        if not (by_sources or by_values):
            return None
        return ("scores are the reference's scores transposed (keys @ queries.T): row i holds key i against every "
                "query, where queries @ keys.T was expected; swap the operands so each row is one query.")

    def query_source(self) -> None:
        if not self.present("queries") or any(f.stage == "queries" for f in self.findings):
            return
        source = self.v.sources.get("queries")
        if source not in (None, "queries"):
            self.add("query_source", "queries", f"queries come from the {_PROJECTIONS[source]} projection where "
                     f"x @ W_query was expected; check which weight matrix the queries line multiplies by.")
        elif self.compare("queries") and self.differs("queries"):
            origin = "not from a projection" if source is None else "from W_query"
            self.add("query_source", "queries", f"queries ({origin}) do not match x @ W_query of the same tokens; "
                     f"check the queries line: the input rows and the weight matrix it uses.")

    def key_index(self) -> None:
        if not self.present("keys") or any(f.stage == "keys" for f in self.findings):
            return
        source = self.v.sources.get("keys")
        if source not in (None, "keys"):
            self.add("key_index", "keys", f"keys come from the {_PROJECTIONS[source]} projection where x @ W_key "
                     f"was expected, so no key row belongs to its token; check the keys line.")
            return
        if not (self.compare("keys") and self.differs("keys")):
            return
        keys = self.v.stages["keys"]
        for shift in (1, -1):  # keys[i] == reference keys[i + shift]  <=>  roll(keys, shift) == reference keys
            if not self.differs("keys", torch.roll(keys, shifts=shift, dims=-2)):
                self.add("key_index", "keys", f"keys row i matches reference row i{shift:+d} "
                         f"(the key rows are shifted by one token), so each query is scored against its "
                         f"neighbour's key; check the key index (Python counts from 0) and any roll or slice of keys.")
                return
        self.add("key_index", "keys", "keys do not match x @ W_key row for row, so queries are scored against "
                 "the wrong key rows; check the key index and the keys line.")

    def scaling(self) -> None:
        if any(f.code in ("position_bias", "softcap", "declared_scale") for f in self.findings):
            return  # a recognised deliberate change to the softmax input explains its scale
        observed, expected = self.d.get("scale_observed", math.nan), self.d.get("scale_expected", math.nan)
        masked = self.masked_scale()
        observed = observed if masked is None else masked
        rtol = max(_SCALE_RTOL, 2 * capture_eps(self.v))  # bfloat16 rounds the factor itself
        off = abs(observed - expected) > rtol * expected
        if not (math.isfinite(observed) and math.isfinite(expected) and off):
            return
        if not self.v.prescale:
            used, right, hint = self.scale_names(observed)
            self.add("scaling", "scaled_scores", f"the softmax input is the scores scaled by {_fmt(observed)}{used}, "
                     f"expected {_fmt(expected)} ({right}); check the division by keys.shape[-1] ** 0.5 "
                     f"before the softmax{hint}.")
            return
        where = " and ".join(f"the {stage} were multiplied by {_fmt(f)}" for stage, f in self.v.prescale.items())
        self.add("scaling", "scaled_scores", f"the softmax input is the scores (unscaled queries @ keys.T) scaled "
                 f"by {_fmt(observed)} in all, expected {_fmt(expected)} (1/sqrt(d_k)); {where} before the score "
                 f"product: scale by keys.shape[-1] ** -0.5 once, there or before the softmax.")

    def scale_names(self, observed: float) -> tuple[str, str, str]:
        """The factor used in the source's words (" = 1/sqrt(d_out)"), the right one, and a hint for
        the common slip of dividing by the whole width instead of one head's."""
        keys, queries = self.v.stages.get("keys"), self.v.stages.get("queries")
        head_dim = keys.shape[-1] if keys is not None else 0
        heads = queries.shape[1] if queries is not None else 1
        right = "1/sqrt(d_k)" if heads == 1 else f"1/sqrt(head_dim), head_dim = keys.shape[-1] = {head_dim}"
        if not head_dim:
            return "", right, ""
        d_in, d_out = self.v.stages["inputs"].shape[-1], heads * head_dim
        names = {"1 (no scaling)": 1.0, f"1/sqrt(d_in) with d_in = {d_in}": d_in ** -0.5,
                 f"1/d_k = 1/{head_dim}": 1 / head_dim}
        if heads > 1:
            names[f"1/sqrt(d_out) with d_out = {d_out}"] = d_out ** -0.5
        used = [name for name, factor in names.items() if abs(observed - factor) <= _SCALE_RTOL * factor]
        if not used:
            return "", right, ""
        hint = ""
        if heads > 1 and any(name.startswith(("1/sqrt(d_out)", "1/sqrt(d_in)")) for name in used):
            hint = (f": each head's keys have head_dim = d_out // num_heads = {head_dim} columns, so divide by "
                    f"keys.shape[-1] ** 0.5 (head_dim), not by the whole width")
        return f" = {' = '.join(used)}", right, hint

    def softmax(self) -> None:
        if not self.present("weights"):
            return
        tol = stage_tolerance("weights", self.v)
        row_err = self.d.get("weights_row_sum_max_err", math.nan)
        col_err = self.d.get("weights_col_sum_max_err", math.nan)
        weights = self.v.stages["weights"]
        square = weights.shape[-1] == weights.shape[-2]
        axis, dim = self.v.softmax_axis, self.v.softmax_dim
        if axis == 2 or (axis is None and square and col_err <= tol < row_err):
            self.add("softmax_axis", "weights", f"weight columns sum to 1 but rows do not: the softmax normalised "
                     f"over the queries (dim {dim if dim is not None else 0}) instead of the keys; use dim=-1 so "
                     f"each query's weights sum to 1.")
            return
        if axis in (0, 1):
            over = "the batch items" if axis == 0 else "the heads"
            nan = ""
            if self.ref_mask is not None and bool(torch.isnan(weights).any()):
                nan = (f"; under the causal mask a hidden entry is -inf in every one of {over}, so its softmax "
                       f"is 0/0 = NaN")
            self.add("softmax_axis", "weights", f"the softmax normalised over {over} (dim {dim}) instead of the "
                     f"keys, so each query's weights do not sum to 1{nan}; use dim=-1.")
            return
        softmax_err = self.d.get("weights_softmax_max_err", math.nan)
        if softmax_err > tol and not any(f.code in ("scaling", "mask_after_softmax") for f in self.findings):
            rows = "rows sum to 1" if row_err <= tol else f"rows sum to 1 within {_fmt(row_err)}"
            self.add("not_softmax", "weights", f"weight {rows}, but the weights are not the softmax of the scaled "
                     f"scores (off by up to {_fmt(softmax_err)}); use torch.softmax(scaled scores, dim=-1) "
                     f"instead of a plain normalisation.")

    def value_path(self) -> None:
        if not self.present("values") or any(f.stage in ("values", "weights_applied") for f in self.findings):
            return
        source = self.v.sources.get("values")
        wrong_source = source not in (None, "values")
        origin = f" (they come from {_PROJECTIONS[source]})" if wrong_source else ""
        weights_match = self.compare("weights") and not self.differs("weights")
        if weights_match and self.compare("context") and self.differs("context"):
            self.add("value_path", "values", f"the attention weights match the reference but the context does "
                     f"not: only the values changed{origin}; the values line should be x @ W_value.")
        elif wrong_source:
            self.add("value_path", "values", f"values come from {_PROJECTIONS[source]} where x @ W_value was "
                     f"expected, so the context combines the wrong vectors; check the values line.")

    def output(self) -> None:
        """The module's return value: a wrong tensor returned is always a finding, whatever came before."""
        out, ref = self.v.stages.get("output"), self.ref.stages.get("output")
        if out is None or ref is None or self.merge_and_projection():
            return
        looks_like = self.output_looks_like(out)
        if out.shape != ref.shape and not (self.explained and looks_like is None):  # else a consequence
            what = f"it is the {looks_like}" if looks_like else f"an unknown width of {out.shape[-1]} columns"
            self.add("wrong_output", "output", f"the module returned shape {tuple(self.v.native_shapes['output'])} "
                     f"where {tuple(self.ref.native_shapes['output'])} was expected: {what}, not the context "
                     f"vectors; return attn_weights @ values (merged over the heads and projected as the "
                     f"reference does).")
        elif looks_like and self.shared and not self.explained and self.judged("output") and self.differs("output"):
            self.add("wrong_output", "output", f"the module returned the {looks_like}, not the context vectors; "
                     f"return attn_weights @ values.")
        elif self.compare("output") and self.differs("output") and not self.v.output_is_context and (
                self.compare("context") and not self.differs("context")):  # a context not seen is no match
            self.add("output_path", "output", "the context matches the reference but the output does not: check "
                     "the lines after attn_weights @ values (merging the heads, the output projection).")

    def output_looks_like(self, out: torch.Tensor) -> str | None:
        """Which captured stage the returned tensor is, if any (the weights, the values, ...)."""
        words = {"weights": "attention weights (attn_weights)", "scaled_scores": "scaled scores",
                 "scores": "attention scores (attn_scores)", "values": "values", "queries": "queries",
                 "keys": "keys", "inputs": "inputs"}
        for stage, word in words.items():
            mine = self.v.stages.get(stage)
            if mine is None or mine.numel() != out.numel() or stage == "output":
                continue
            if self.v.output_is_context and stage == "context":
                continue
            if torch.equal(mine.reshape(out.shape), out):
                return word
        return None

    def batched_single(self) -> None:
        diff = self.d.get("batched_single_max_abs_diff", math.nan)
        if self.findings or not self.judged("context") or math.isnan(diff):  # nan: no context
            return
        if not diff > stage_tolerance("context", self.v):
            return
        self.add("batched_single_mismatch", "context", f"row i of the batched context differs from token i's "
                 f"single-token computation softmax(q_i K^T / sqrt(d_k)) V by up to {_fmt(diff)}; "
                 f"predict the shapes and values, then check stage by stage from the scores on.")

    def precision(self) -> None:
        """Values that differ from the reference by more than float32 rounding allows but within
        the bound of the coarser dtype one module ran in (its epsilon x the values' scale x the
        length of each sum): an info note, never a bug; any error found first wins."""

        float32_eps = float(torch.finfo(torch.float32).eps)
        coarse = max((self.v, self.ref), key=capture_eps)
        eps = capture_eps(coarse)
        if eps <= float32_eps or not self.shared or any(f.severity == "error" for f in self.findings):
            return
        compared = [s for s in STAGES if self.present(s) and s in self.ref.stages
                    and self.v.stages[s].shape == self.ref.stages[s].shape]
        beyond = [s for s in compared if self.d.get(f"divergence_{s}", math.nan) > stage_tolerance(s, self.ref, float32_eps)]
        if not beyond or any(self.differs(s) for s in compared):
            return
        dtype = str(coarse.stages["output"].dtype).removeprefix("torch.")
        last = compared[-1]
        self.add("precision", beyond[0], f"{dtype} rounding: the values differ from the reference from the "
                 f"{beyond[0]} on ({last} by up to {self.d[f'divergence_{last}']:.3g}), more than float32 rounding "
                 f"allows but within {dtype}'s bound ({stage_tolerance(last, self.ref, eps):.3g} for the {last}: "
                 f"eps {eps:.3g} x the values' scale x the length of each sum); a precision effect, not a bug.",
                 severity="info")


def diagnose(variant: Capture, reference: Capture, diagnostics: dict[str, float], *,
             weights_shared: bool, train: bool = False, batch_mixing: BatchMixing | None = None) -> list[Finding]:
    """Findings, root cause first, each with the heads and batch items it holds for; a variant that
    matches the reference gets none. `train`: the modules ran in training mode (dropout is then an
    info finding); `batch_mixing`: each batch item run alone against its slice (attnlab.diagnosis.batch_mixing)."""
    return _Diagnosis(variant, reference, diagnostics, weights_shared, train, batch_mixing).run()


__all__ = ["diagnose", "heads_phrase"]
