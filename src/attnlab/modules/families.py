"""Model families as data: one row per family, in the style of TransformerLens' per-architecture
adapters and transformers' attention interface.

A row says where a family keeps its attention in the model, how its projections are named (a
fused query-key-value projection and its order, the output projection), what the model does after
the stack (final norm, logit scaling or softcapping), which forward arguments the model passes its
attention and how each is built, and the spellings its config and constructors use for attnlab's
keys. A family not listed falls back to `GENERIC`, whose spellings are the union every lookup
reads. A new family is one row here and one test row in tests/modules/test_families.py.

Argument providers (`Family.arguments` values, what `attnlab.modules.arguments` can build):
  mask           the attention mask of `mask` kind and `mask_values` form
  position_embeddings  (cos, sin) of the module's RoPE
  position_ids   0..tokens-1 per batch item
  position_bias  the module's own relative bias (T5, MPT: built by the module or its model)
  alibi          the ALiBi bias of the model file's build_alibi_tensor
  layer_idx      the layer index (0)
  is_causal      whether the row's mask is causal (CLIP text's model passes is_causal=True to a non-causal class)
"""

from __future__ import annotations

from dataclasses import dataclass, field

MASK_KINDS = ("causal", "sliding", "chunked", "local_global", "bidirectional")
MASK_VALUES = ("additive", "binary", "bool")  # -inf/0 added; 1 keep / 0 drop; True drop (the book's)
CONSTRUCTOR_SOURCES = ("config", "layer", "d_in", "num_heads", "dropout")
# transformers' decoder layers build their attention as `Cls(config=config, layer_idx=layer_idx)`
CONFIG_AND_LAYER = {"config": "config", "layer_idx": "layer"}
CONFIG_ONLY = {"config": "config"}
PROVIDERS = ("mask", "position_embeddings", "position_ids", "position_bias", "alibi", "layer_idx", "is_causal")


@dataclass(frozen=True)
class Family:
    """One model family: how its attention sits in the model and how it is called."""

    name: str  # the model type (transformers' `model_type`) or a library's name
    attention: str  # the attention module's path in the model, `{i}` the layer: "model.layers.{i}.self_attn"
    out_proj: str | None = "o_proj"  # the output projection's name inside the attention module
    fused_qkv: str | None = None  # a fused query-key-value projection's name
    # its column blocks: "qkv" ([q | k | v]), "per_head" ((heads, 3, head_dim)) when every head has its own
    # key and value, [q | k | v] with fewer (Falcon's and GPTBigCode's multi-query)
    fused_order: str = "qkv"
    final_norm: str | None = "model.norm"  # the norm after the stack, None: none (post-norm encoders)
    logit_scale: str | None = None  # the config attribute the logits are multiplied by (Cohere's logit_scale)
    logit_divide: str | None = None  # ...divided by (Granite's logits_scaling)
    logit_softcap: str | None = None  # ...capped by tanh at (Gemma 2's final_logit_softcapping)
    mask: str = "causal"  # one of MASK_KINDS
    mask_values: str = "additive"  # one of MASK_VALUES
    arguments: dict[str, str] = field(default_factory=dict)  # forward parameter -> provider (PROVIDERS)
    spellings: dict[str, tuple[str, ...]] = field(default_factory=dict)  # attnlab key -> config spellings
    scaling: float | None = None  # the factor on the scores instead of 1/sqrt(head_dim): T5's 1.0
    attention_class: str | None = None  # `hf:NAME`'s class when not <Model>SelfAttention/<Model>Attention
    # how the model's own layer builds its attention, keyword -> what it is given: "config", "layer" (the
    # layer index) or an attnlab key read off the config under the family's spellings (BART's embed_dim)
    constructor: dict[str, str] = field(default_factory=lambda: dict(CONFIG_AND_LAYER))

    def __post_init__(self) -> None:
        if self.mask not in MASK_KINDS or self.mask_values not in MASK_VALUES:
            raise ValueError(f"family {self.name}: mask {self.mask}/{self.mask_values} not in {MASK_KINDS}/{MASK_VALUES}")
        unknown = set(self.arguments.values()) - set(PROVIDERS) | set(self.constructor.values()) - set(CONSTRUCTOR_SOURCES)
        if unknown:
            raise ValueError(f"family {self.name}: unknown providers {sorted(unknown)}")


_ROPE = {"attention_mask": "mask", "position_embeddings": "position_embeddings", "position_ids": "position_ids"}
_MASK = {"attention_mask": "mask"}
# BART's and Whisper's encoder layers: sizes by name, then the config
_BY_SIZE = {"embed_dim": "d_in", "num_heads": "num_heads", "dropout": "dropout", "config": "config", "layer_idx": "layer"}

FAMILIES: tuple[Family, ...] = (
    Family("llama", "model.layers.{i}.self_attn", arguments=_ROPE),
    Family("mistral", "model.layers.{i}.self_attn", mask="sliding", arguments=_ROPE),
    Family("mixtral", "model.layers.{i}.self_attn", mask="sliding", arguments=_ROPE),
    Family("qwen3", "model.layers.{i}.self_attn", arguments=_ROPE),
    Family("olmo", "model.layers.{i}.self_attn", arguments=_ROPE),
    Family("cohere", "model.layers.{i}.self_attn", logit_scale="logit_scale", arguments=_ROPE),
    Family("granite", "model.layers.{i}.self_attn", logit_divide="logits_scaling", arguments=_ROPE),
    Family("gemma2", "model.layers.{i}.self_attn", logit_softcap="final_logit_softcapping", mask="local_global",
           arguments=_ROPE),
    Family("gemma3n_text", "model.layers.{i}.self_attn", logit_softcap="final_logit_softcapping",
           mask="local_global", arguments=_ROPE, scaling=1.0),  # QK-norm carries the scale
    Family("llama4_text", "model.layers.{i}.self_attn", mask="chunked", arguments=_ROPE),
    Family("deepseek_v3", "model.layers.{i}.self_attn", arguments=_ROPE),  # latent attention: recognisers.latent
    Family("phi3", "model.layers.{i}.self_attn", fused_qkv="qkv_proj", mask="sliding", arguments=_ROPE),
    Family("gpt2", "transformer.h.{i}.attn", out_proj="c_proj", fused_qkv="c_attn", final_norm="transformer.ln_f",
           arguments=_MASK),
    Family("gpt_bigcode", "transformer.h.{i}.attn", out_proj="c_proj", fused_qkv="c_attn", fused_order="per_head",
           final_norm="transformer.ln_f", arguments=_MASK),
    Family("falcon", "transformer.h.{i}.self_attention", out_proj="dense", fused_qkv="query_key_value",
           fused_order="per_head", final_norm="transformer.ln_f",
           arguments={**_ROPE, "alibi": "alibi"}, spellings={"num_kv_heads": ("num_kv_heads",)}),
    Family("mpt", "transformer.blocks.{i}.attn", out_proj="out_proj", fused_qkv="Wqkv", final_norm="transformer.norm_f",
           mask_values="bool",
           arguments={"attention_mask": "mask", "position_bias": "position_bias"},
           spellings={"d_in": ("d_model",), "num_heads": ("n_heads",)}),
    Family("bert", "bert.encoder.layer.{i}.attention.self", out_proj=None, final_norm=None, mask="bidirectional",
           arguments=_MASK),
    Family("modernbert", "model.layers.{i}.attn", out_proj="Wo", fused_qkv="Wqkv", final_norm="model.final_norm",
           mask="bidirectional", arguments=_ROPE),  # an encoder: its local layers' window is both ways
    Family("deberta-v2", "deberta.encoder.layer.{i}.attention.self", out_proj=None, final_norm=None,
           mask="bidirectional", mask_values="binary", arguments=_MASK, attention_class="DisentangledSelfAttention",
           constructor=CONFIG_ONLY),
    Family("vit", "vit.layers.{i}.attention", out_proj="o_proj", final_norm="vit.layernorm",
           mask="bidirectional", constructor=CONFIG_ONLY),
    Family("clip_text_model", "text_model.encoder.layers.{i}.self_attn", out_proj="out_proj",
           final_norm="text_model.final_layer_norm", arguments={"attention_mask": "mask", "is_causal": "is_causal"},
           constructor=CONFIG_ONLY),
    *(Family(name, "encoder.block.{i}.layer.0.SelfAttention", out_proj="o", final_norm="encoder.final_layer_norm",
             mask="bidirectional", arguments={"mask": "mask", "position_bias": "position_bias"},
             spellings={"d_in": ("d_model",), "head_dim": ("d_kv",)}, scaling=1.0)
      for name in ("t5", "mt5", "umt5", "longt5")),  # unscaled scores: the initialisation carries the scale
    Family("bart", "model.encoder.layers.{i}.self_attn", out_proj="out_proj", final_norm=None, mask="bidirectional",
           arguments=_MASK, spellings={"d_in": ("d_model", "embed_dim"), "num_heads": ("encoder_attention_heads",)}, constructor=_BY_SIZE),
    Family("whisper", "model.encoder.layers.{i}.self_attn", out_proj="out_proj", final_norm="model.encoder.layer_norm",
           mask="bidirectional", arguments=_MASK,
           spellings={"d_in": ("d_model", "embed_dim"), "num_heads": ("encoder_attention_heads",)}, constructor=_BY_SIZE),
    # libraries beside transformers: a module called by its forward's names
    Family("torch", "", out_proj="out_proj", fused_qkv="in_proj", final_norm=None, mask="bidirectional",
           mask_values="bool", arguments={"attn_mask": "mask"}, spellings={"d_in": ("embed_dim",)}),
    Family("llms_from_scratch", "trf_blocks.{i}.att", out_proj="out_proj", final_norm="final_norm",
           mask_values="bool", arguments={"mask": "mask"},
           spellings={"d_in": ("d_in",), "num_kv_heads": ("num_kv_groups",)}),
    Family("x_transformers", "attn_layers.layers.{i}.1", out_proj="to_out", final_norm="attn_layers.final_norm",
           mask="bidirectional", mask_values="bool",
           spellings={"num_heads": ("heads",), "num_kv_heads": ("kv_heads",), "head_dim": ("dim_head",)}),
    Family("diffusers", "", out_proj="to_out", final_norm=None, mask="bidirectional",
           spellings={"d_in": ("query_dim",), "num_heads": ("heads",), "head_dim": ("dim_head",)}),
    Family("timm", "blocks.{i}.attn", out_proj="proj", fused_qkv="qkv", final_norm="norm", mask="bidirectional",
           spellings={"d_in": ("dim",)}),
)

# The fallback every lookup reads for a family not listed: the spellings config classes and
# constructors use for attnlab's keys, most common first.
GENERIC = Family(
    "generic", "", arguments=_ROPE,
    spellings={
        "d_in": ("hidden_size", "n_embd", "d_model", "embed_dim", "dim", "query_dim", "d_in"),
        "num_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads", "heads", "encoder_attention_heads"),
        "num_kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "n_kv_head", "num_kv_groups",
                         "kv_heads"),
        "head_dim": ("head_dim", "dim_head", "d_kv", "head_size", "kv_channels"),
        "dropout": ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "dropout"),
        "qkv_bias": ("attention_bias", "qkv_bias", "bias"),
        "context_length": ("max_position_embeddings", "n_positions", "block_size", "context_length"),
    },
)


def family(name: str) -> Family:
    """The row of a model type or library, else GENERIC."""
    return next((f for f in FAMILIES if f.name == name), GENERIC)


def spellings(key: str, name: str = "") -> tuple[str, ...]:
    """Every spelling of attnlab's `key`, once each: the family `name`'s own first (Falcon's
    num_kv_heads before the num_key_value_heads it derives), then GENERIC's, then the other rows'."""
    rows = [s for f in FAMILIES for s in f.spellings.get(key, ())]
    own = family(name).spellings.get(key, ()) if name else ()
    return tuple(dict.fromkeys([*own, *GENERIC.spellings.get(key, ()), *rows]))


def markdown_table(rows: tuple[Family, ...] = FAMILIES) -> str:
    """The supported table of docs/guide/modules.md, one line per row."""
    lines = ["| family | attention | fused QKV | output | final norm | logits | mask | arguments |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        logits = (f"× {row.logit_scale}" if row.logit_scale else f"÷ {row.logit_divide}" if row.logit_divide
                  else f"softcap {row.logit_softcap}" if row.logit_softcap else "")
        fused = f"{row.fused_qkv} ({row.fused_order})" if row.fused_qkv else ""
        arguments = ", ".join(f"{name}={provider}" for name, provider in row.arguments.items())
        cells = [row.name, row.attention, fused, row.out_proj or "", row.final_norm or "", logits,
                 f"{row.mask}, {row.mask_values}", arguments]
        lines.append("| " + " | ".join(f"`{c}`" if c and i in (1, 2, 3, 4) else c for i, c in enumerate(cells)) + " |")
    return "\n".join(lines)
