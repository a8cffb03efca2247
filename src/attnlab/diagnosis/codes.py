"""Every finding code, declared once: where it is reported, how severe it is, when its check runs,
which codes it switches off, what it means and what shows it.

attnlab.diagnosis.check_runner runs each check once, in the order of the first code it may
return; a finding whose code an earlier finding suppresses is dropped (a check whose codes are all
suppressed does not run). Adding a check or a recogniser is one row here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from attnlab.diagnosis import recognisers
from attnlab.diagnosis.checks import batch, heads, mask, precision, scaling, softmax_dropout, sources, unplaced
from attnlab.diagnosis.context import Check

FIRST_WHERE_IT_SHOWS: tuple[str, ...] = ()  # `stages` of a code reported at whichever stage it first shows
MASK_CODES = ("mask_missing", "mask_offset", "mask_fill_value", "mask_after_softmax")


@dataclass(frozen=True)
class Code:
    code: str
    stages: tuple[str, ...]  # where it may be reported; FIRST_WHERE_IT_SHOWS: the first stage that shows it
    severity: str  # "error" (a bug) or "info" (deliberate, or not a bug)
    order: int  # when its check runs: lower first
    check: Check  # the function that may return it
    meaning: str  # one line
    shown_by: str  # a built-in variant that triggers it, or the test that does
    suppresses: tuple[str, ...] = ()  # codes dropped once this one is found
    explains: bool = True  # found, it explains why later stages differ: comparisons after it stop


CODES: tuple[Code, ...] = (
    # deliberate changes first: each would otherwise read as a wrong source or a wrong scale
    Code("rotary", ("queries",), "info", 10, recognisers.rotary,
         "queries and keys rotated per position (RoPE); names the pairing and the base", "rope"),
    Code("rotary_misapplied", ("queries", "keys", "values"), "error", 10, recognisers.rotary,
         "RoPE applied to the values too, or to the queries and not the keys",
         "tests/diagnosis/test_recognisers.py::test_rope_on_the_values_too_is_an_error_at_the_values"),
    Code("xpos", ("queries",), "info", 10, recognisers.xpos,
         "rotary positions with each pair of the queries scaled by zeta ** (t / gamma), the keys' by its inverse (xPos)",
         "tests/diagnosis/test_declared_changes.py::test_xpos_is_named_not_a_query_source",
         suppresses=("query_source", "key_index", "rotary_misapplied")),
    Code("qk_norm", ("queries",), "info", 11, recognisers.qk_norm,
         "queries and keys have unit RMS per head before the product", "qk_norm"),
    Code("cosine_attention", ("queries",), "info", 11, recognisers.cosine_attention,
         "queries and keys divided by their length per head: scores are cosines, scaled by a chosen temperature",
         "tests/diagnosis/test_cosine.py::test_cosine_similarity_attention_is_named_with_its_temperature",
         suppresses=("scaling",)),
    Code("window", ("scaled_scores",), "info", 12, recognisers.window,
         "each query sees its last w keys, itself included", "sliding_window", suppresses=MASK_CODES),
    Code("position_bias", ("scaled_scores",), "info", 13, recognisers.position_bias,
         "the softmax input plus a bias that depends only on the query-key distance (ALiBi)", "alibi",
         suppresses=("scaling",)),
    Code("softcap", ("scaled_scores",), "info", 14, recognisers.softcap,
         "the softmax input is c * tanh(s / c) of the scaled scores", "softcap", suppresses=("scaling",)),
    Code("declared_scale", ("scaled_scores",), "info", 15, recognisers.declared_scale,
         "the scores scaled as the module's config declares (query_pre_attn_scalar), not 1/sqrt(head_dim)",
         "tests/modules/test_hf_modules.py::test_gemma2s_soft_cap_window_scale_rope_and_grouping_are_each_named",
         suppresses=("scaling",)),
    Code("clipped_qkv", ("queries",), "info", 16, recognisers.clipped_qkv,
         "queries, keys and values clamped to the bound the module's config declares (OLMo's clip_qkv)",
         "tests/diagnosis/test_clipping.py::test_olmo_s_declared_clip_is_named_not_a_query_source"),
    Code("latent_attention", ("keys",), "info", 16, recognisers.latent_attention,
         "keys and values expanded per head from a shared latent, each key ending in the shared RoPE key (MLA)",
         "tests/diagnosis/test_recognisers.py::test_deepseek_latent_attention_is_named_not_a_projection_width",
         suppresses=("shape_projection",)),
    Code("attention_sinks", ("weights",), "info", 17, recognisers.attention_sinks,
         "a learned logit per head joins each row's softmax as one more column, dropped after it (gpt-oss's sinks)",
         "tests/diagnosis/test_declared_changes.py::test_attention_sinks_are_named_with_their_logits",
         suppresses=("not_softmax", "softmax_axis", "mask_after_softmax")),
    Code("output_gate", ("output",), "info", 17, recognisers.output_gate,
         "the context multiplied by a gate from a projection's own columns before the output projection (Qwen3-Next)",
         "tests/diagnosis/test_declared_changes.py::test_a_gate_inside_q_proj_is_loaded_and_named",
         suppresses=("out_proj", "head_merge", "output_path", "wrong_output")),
    # the mask, the shapes and the heads
    Code("mask_after_softmax", ("weights",), "error", 20, mask.mask_shape,
         "future weights zeroed after the softmax, rows not renormalised", "causal_mask_after_softmax",
         suppresses=("not_softmax",)),
    Code("mask_fill_value", ("scaled_scores",), "error", 20, mask.mask_shape,
         "masked with a finite value whose weight is not 0, instead of -inf", "causal_mask_fill_zero"),
    Code("mask_missing", ("scaled_scores",), "error", 20, mask.mask_shape,
         "the reference hides future tokens, the variant none", "causal_mask_missing"),
    Code("mask_offset", ("scaled_scores",), "error", 20, mask.mask_shape,
         "the mask hides other keys than the reference's (triu's diagonal off by one)", "causal_mask_diagonal_0",
         suppresses=("non_finite",)),
    Code("non_finite", FIRST_WHERE_IT_SHOWS, "error", 30, mask.non_finite,
         "NaN or inf that no mask placed (e.g. a mask that hides every key from a query)",
         "tests/diagnosis/test_findings.py::test_a_bug_behind_a_causal_mask_is_still_found"),
    Code("shape_projection", ("queries", "keys", "values", "output"), "error", 40, sources.shapes,
         "a projection of the wrong width (d_in for d_out), or every head built with the whole d_out",
         "d_in_projection"),
    Code("head_split", ("queries", "keys", "values"), "error", 50, heads.head_split,
         "heads split with .view(b, num_heads, num_tokens, head_dim), without the transpose", "mha_head_split"),
    Code("kv_heads", ("keys",), "info", 60, heads.kv_heads,
         "keys and values shared by groups of query heads (GQA, MQA)", "gqa"),
    # the source's debugging order: query source, key index, scaling, softmax axis
    Code("scores_transposed", ("scores",), "error", 70, sources.scores_transposed,
         "the scores are keys @ queries.T", "transposed_scores", suppresses=("query_source", "key_index")),
    Code("query_source", ("queries",), "error", 80, sources.query_source,
         "the queries are not x @ W_query (e.g. the keys used as queries)", "keys_as_queries"),
    Code("key_index", ("keys",), "error", 90, sources.key_index,
         "the keys are misaligned with their tokens (e.g. shifted by one row)", "shifted_keys"),
    Code("masked", ("scaled_scores",), "info", 100, mask.masked,
         "a mask the reference does not have (e.g. causal): not a bug, later stages differ", "causal"),
    Code("scaling", ("scaled_scores",), "error", 110, scaling.scaling,
         "the softmax input is not scores / sqrt(d_k); names both factors", "unscaled",
         suppresses=("not_softmax",)),
    Code("softmax_axis", ("weights",), "error", 120, softmax_dropout.softmax,
         "the softmax ran over the queries, the heads or the batch, not the keys", "wrong_softmax_axis"),
    Code("not_softmax", ("weights",), "error", 120, softmax_dropout.softmax,
         "the weights are not a softmax (a plain normalisation, linear attention)", "plain_normalisation"),
    Code("dropout", ("weights_applied",), "info", 130, softmax_dropout.dropout,
         "train=true: dropout, with the rate it estimates",
         "tests/diagnosis/test_findings_multi_head.py::test_dropout_in_training_is_a_note_with_its_rate"),
    Code("dropout_active", ("weights_applied",), "error", 130, softmax_dropout.dropout,
         "an eval-mode run whose applied weights show dropout", "causal_dropout_always"),
    Code("value_path", ("values",), "error", 140, sources.value_path,
         "the weights equal the reference's but the context does not: only the values changed",
         "values_from_key"),
    # after the context
    Code("out_proj", ("output",), "error", 150, heads.output,
         "the output is not out_proj(merged context): missing, applied twice, or per head", "mha_out_proj_missing"),
    Code("head_merge", ("output",), "error", 150, heads.output,
         "the context merged with .reshape(b, num_tokens, d_out) without .transpose(1, 2)", "mha_head_merge"),
    Code("wrong_output", ("output",), "error", 150, heads.output,
         "the module returned something other than the context (the weights, the scores, ...)",
         "tests/diagnosis/test_truths.py::test_returning_the_weights_is_a_wrong_output_finding"),
    Code("output_path", ("output",), "error", 150, heads.output,
         "the context matches the reference but the output does not: the lines after attn_weights @ values",
         "tests/diagnosis/test_codes.py::test_a_wrong_output_after_a_right_context_is_output_path"),
    Code("batched_single_mismatch", ("context",), "error", 160, batch.batched_single,
         "row i of the batched context is not token i's own computation, and nothing earlier explains it",
         "tests/diagnosis/test_codes.py::test_a_row_that_is_not_its_own_computation_is_batched_single_mismatch"),
    Code("batch_mixing", FIRST_WHERE_IT_SHOWS, "error", 170, batch.batch_mixing,
         "a batch item's result depends on the other items of its batch", "causal_batch_centred_keys",
         explains=False),
    Code("precision", FIRST_WHERE_IT_SHOWS, "info", 180, precision.precision,
         "bfloat16/float16 rounding beyond float32's bound but within the coarser dtype's: not a bug",
         "tests/compute/test_precision.py::test_a_correct_variant_in_low_precision_gets_precision_only"),
    # what cannot be compared: every check leaves those stages alone; last, so no check skips a stage for it
    Code("not_observable", ("queries", "keys", "values", "scores", "scaled_scores", "weights", "weights_applied",
                            "context"), "info", 190, unplaced.not_observable,
         "stages computed in a layout attnlab cannot place (heads folded into the batch, windows, sub-heads): "
         "named, never compared with the reference",
         "tests/capture/test_follows_data.py::test_a_correct_copy_gives_no_error_finding", explains=False),
)

BY_CODE: dict[str, Code] = {c.code: c for c in CODES}

# Findings a run inside a model adds (attnlab.model) from what no capture holds: the two models'
# parameters (the learner's check, errors at the stage of the projection) and the model's own
# heads on the text (info, at weights). Code -> what it means; `expect.findings` accepts them.
MODEL_CODES: dict[str, str] = {
    "qkv_order": "a projection holds another role's columns of the fused c_attn: q, k, v split in the wrong order",
    "not_transposed": "a Conv1D weight (stored (in, out)) copied into an nn.Linear (stored (out, in)) without .T",
    "bias_missing": "a projection without the reference's bias: left out (qkv_bias=False) or not loaded",
    "previous_token_head": "a head that puts most of its weight on the token just before the query",
    "first_token_head": "a head that puts most of its weight on the first token (an attention sink)",
    "uniform_head": "a head that spreads its weight evenly over the tokens it may see",
}


def closest(code: str) -> str | None:
    """The declared code nearest to a mistyped one (`scalling` -> `scaling`), if any is near."""
    near = difflib.get_close_matches(code, [*BY_CODE, *MODEL_CODES], n=1, cutoff=0.6)
    return near[0] if near else None
