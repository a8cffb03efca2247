"""The whole-model survey: each causal-LM type of the installed transformers, its config shrunk to
small sizes, built from that config (nothing downloaded), saved, and run in attnlab as
`model.path=DIR layer=0 inputs=ids` with the default variant. Its outcome is classified as the
variant survey's, with the KL of the swapped-in copy against the model's own output."""

from __future__ import annotations

import csv
import io
import json
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.conformance.survey import Row, _line, refusal

IDS = "[1,5,17,42,100,7,300,11]"  # token ids under the small vocabulary
OVERRIDES = ("layer=0", "inputs=ids", f"inputs.ids={IDS}")
# the small sizes, by attnlab's key (attnlab.modules.families spellings): every spelling a config holds is set
SMALL = {"d_in": 64, "num_heads": 4, "head_dim": 16, "num_layers": 2, "vocab_size": 512}
# sizes no adapter spells: the feed-forward's and a mixture of experts' (and MLA's low-rank and rotary parts)
OTHER = {"intermediate_size": 128, "ffn_dim": 128, "n_inner": 128, "d_ff": 128, "ffn_hidden_size": 128,
         "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "expert_intermediate_size": 32,
         "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
         "num_experts_per_tok": 2, "moe_k": 2, "top_k": 2, "n_group": 1, "topk_group": 1,
         "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16,
         "rotary_dim": 8, "first_k_dense_replace": 1,
         # weights ten times the usual spread: a layer changes the output enough that a wrong copy shows in the KL
         "initializer_range": 0.2}
MAX_TOKENS = 8


@dataclass
class ModelRow(Row):
    """One type's line of the whole-model table: the variant survey's, with the copy's KL."""

    kl: float | None = None  # the mean KL of the model's next-token distributions with the variant in layer 0


def causal_lm_types() -> list[str]:
    """Every type of transformers' causal-LM mapping."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def small_sizes() -> dict[str, Any]:
    """Each spelling of a size -> its small value."""
    from attnlab.modules.families import spellings

    sizes = {spelling: value for key, value in SMALL.items() for spelling in spellings(key)}
    return {**sizes, **OTHER}


def shrunk(config: Any) -> Any:
    """`config` built again with every size key it holds (and its sub-configs hold) set small: only
    the changed keys are passed, so what its constructor derives from them (DeepSeek's qk_head_dim, a
    default `layer_types`) is derived again."""
    return type(config)(**_changes(config.to_dict(), small_sizes()))


def _changes(values: dict[str, Any], sizes: dict[str, Any]) -> dict[str, Any]:
    """The keys of one config's dict to set: the small sizes; key/value heads as they relate to the
    heads (as many, one, or a group of two); lists of one entry per layer cut to the small count."""
    from attnlab.modules.families import spellings

    heads = next((values[k] for k in spellings("num_heads") if _size(values.get(k))), None)
    layers = next((values[k] for k in spellings("num_layers") if _size(values.get(k))), None)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):  # a sub-config or a dict attribute: whole, with its own changes
            inner = _changes(_layer_keys(value, layers), sizes)
            if inner or len(_layer_keys(value, layers)) != len(value):
                out[key] = {**_layer_keys(value, layers), **inner}
        elif key in spellings("num_kv_heads") and _size(value):
            out[key] = SMALL["num_heads"] if heads is None or value >= heads else 1 if value == 1 else 2
        elif key in sizes and _size(value) and value != sizes[key]:
            out[key] = sizes[key]
        elif str(key).endswith(("_token_id", "_token_index")) and isinstance(value, int) and value >= SMALL["vocab_size"]:
            out[key] = SMALL["vocab_size"] - 1  # a special token inside the small vocabulary (an embedding's padding_idx)
        elif isinstance(value, list) and layers and len(value) == layers > SMALL["num_layers"]:
            out[key] = _two_layers(value)
        elif str(key).endswith("block_types") and isinstance(value, list) and len(value) > SMALL["num_layers"]:
            out[key] = _two_layers(value)  # a pattern of layer kinds repeated (RecurrentGemma's): one of each
        elif str(key).endswith("_period") and _size(value) and _size(values.get(key[:-len("period")] + "offset")):
            # a layer kind every `period` layers from `offset` (Jamba's attention): the second of the two
            out[key], out[key[:-len("period")] + "offset"] = 2, 1
    return out


def _layer_keys(values: dict[Any, Any], layers: int | None) -> dict[Any, Any]:
    """A dict keyed by layer index (Gemma 4's `per_layer_config`) keeps the small count's layers."""
    if not values or not layers or not all(isinstance(k, int) or str(k).isdigit() for k in values):
        return values
    return {k: v for k, v in values.items() if int(k) < SMALL["num_layers"]}


def _two_layers(per_layer: list[Any]) -> list[Any]:
    """A per-layer list cut to two layers: the first, and the first of another kind where there is
    one (a hybrid keeps an attention layer beside its first linear or recurrent one)."""
    other = next((entry for entry in per_layer if entry != per_layer[0]), per_layer[1])
    return [per_layer[0], other]


def _size(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def build_small(model_type: str) -> Any:
    """The type's causal LM, built from its shrunk default config (random weights), run once on the
    survey's ids by transformers alone: a model that fails there is transformers' to fix, not attnlab's."""
    import torch
    import transformers

    config = shrunk(transformers.AutoConfig.for_model(model_type))
    model = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]  # untyped in transformers
        config, attn_implementation="eager").eval()
    with torch.no_grad():
        model(input_ids=torch.tensor([json.loads(IDS)]), use_cache=False)
    return model


def survey_model(model_type: str) -> ModelRow:
    """The type's small causal LM run once in attnlab with the default variant, classified; never raises."""
    import attnlab
    from attnlab.errors import UserError

    row = ModelRow(model_type, defines_attention=True)
    start = time.perf_counter()
    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="attnlab-model-survey-") as folder:
        warnings.simplefilter("ignore")
        try:
            model = build_small(model_type)
            model.save_pretrained(folder)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - transformers itself cannot build it at these sizes
            row.outcome, row.message = "cannot_build", _line(f"{type(exc).__name__}: {exc}")
            row.seconds = round(time.perf_counter() - start, 2)
            return row
        try:
            result = attnlab.run(overrides=[f"model.path={folder}", *OVERRIDES])
        except UserError as exc:
            row.outcome, row.message = refusal(str(exc)), _line(str(exc))
            if not _has_attention(model):
                row.outcome = "no_attention"
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - a crash, named
            row.outcome, row.message = "crash", _line(f"{type(exc).__name__}: {exc}")
        else:
            _classify(row, (result[0] if isinstance(result, list) else result).record)  # layer=0: one result
    row.seconds = round(time.perf_counter() - start, 2)
    return row


def _has_attention(model: Any) -> bool:
    """Any module of the model is an ...Attention class (a state-space model such as Mamba has none)."""
    from attnlab.modules.hf_find import ATTENTION_SUFFIXES

    return any(type(module).__name__.endswith(ATTENTION_SUFFIXES) for module in model.modules())


def _classify(row: ModelRow, record: Any) -> None:
    row.cls = f"{record.variant.name} in {record.model.attention}" if record.model else ""
    row.info = [f"{f.code}@{f.stage}" for f in record.findings if f.severity != "error"]
    row.errors = [f"{f.code}@{f.stage}" for f in record.findings if f.severity == "error"]
    effect = record.model.effect if record.model else None
    row.kl = effect.kl_mean if effect is not None else None
    if record.status != "ok":
        row.outcome, row.message = refusal(record.error or ""), _line(record.error or record.status)
    elif row.errors:
        row.outcome = "error_finding"
    elif row.kl is None or not row.kl < KL_CORRECT:
        row.outcome, row.message = "error_finding", f"the copy's KL {row.kl}"
    else:
        row.outcome = "ok"


KL_CORRECT = 1e-6  # a correct copy of the layer's attention changes the output by float rounding only
# outcome classes, best first: the page's order
OUTCOMES = ("ok", "error_finding", "cannot_build", "no_attention", "refused", "crash", "timeout")


def buildable(row: Row) -> bool:
    """A type transformers itself builds and runs at the small sizes, and that has attention: the
    share ok is of these."""
    return row.outcome not in ("cannot_build", "no_attention")


def models_csv(found: Sequence[Row], version: str) -> str:
    """The whole-model table: one line per type (type, outcome, findings, KL, seconds, message)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("type", "run", "outcome", "declared", "errors", "kl", "seconds", "message", "transformers"))
    for r in sorted(found, key=lambda r: r.type):
        kl = getattr(r, "kl", None)
        writer.writerow([r.type, r.cls, r.outcome, " ".join(r.info), " ".join(r.errors),
                         "" if kl is None else f"{kl:.3g}", f"{r.seconds:.2f}", r.message, version])
    return out.getvalue()
