"""A family adapter: what attnlab reads about one model family, as data.

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
    # the whole model's spellings where its layers are not the class `hf:NAME` builds (Whisper's causal LM
    # runs its decoder, whose heads are decoder_attention_heads where its config's attribute map says the encoder's)
    model_spellings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    task: str = "causal"  # the whole model attnlab runs besides its causal or seq2seq LM: "image" (ViT's classifier)
    aliases: tuple[str, ...] = ()  # other model types this adapter serves (mT5's and UMT5's are T5's)
    # an encoder–decoder's self-attention inside each stack, `{i}` the layer: {"encoder": "block.{i}.layer.0.SelfAttention"}
    stacks: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mask not in MASK_KINDS or self.mask_values not in MASK_VALUES:
            raise ValueError(f"family {self.name}: mask {self.mask}/{self.mask_values} not in {MASK_KINDS}/{MASK_VALUES}")
        unknown = set(self.arguments.values()) - set(PROVIDERS) | set(self.constructor.values()) - set(CONSTRUCTOR_SOURCES)
        if unknown:
            raise ValueError(f"family {self.name}: unknown providers {sorted(unknown)}")


ROPE = {"attention_mask": "mask", "position_embeddings": "position_embeddings", "position_ids": "position_ids"}
MASK = {"attention_mask": "mask"}
# BART's and Whisper's encoder layers: sizes by name, then the config
BY_SIZE = {"embed_dim": "d_in", "num_heads": "num_heads", "dropout": "dropout", "config": "config", "layer_idx": "layer"}
