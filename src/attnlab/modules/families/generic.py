"""The generic adapter: today's guesses for a family without a file of its own, and the spellings
every lookup falls back to."""

from attnlab.modules.families.adapter import ROPE, Family

# The fallback every lookup reads for a family not listed: the spellings config classes and
# constructors use for attnlab's keys, most common first.
ADAPTER = Family(
    "generic", "", final_norm=None, arguments=ROPE, logit_softcap="final_logit_softcapping",
    spellings={
        "d_in": ("hidden_size", "n_embd", "emb_dim", "d_model", "embed_dim", "dim", "query_dim", "d_in",
                 "hidden_sizes", "embed_dims", "patch_embeds_hidden_size",  # stage widths (PVT's, CLAP's audio Swin,
                 "embed_dim_per_stage"),  # SAM 2's Hiera)
        "num_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads", "heads", "encoder_attention_heads",
                      "num_attention_heads_per_stage"),
        "num_kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "n_kv_head", "num_kv_groups",
                         "kv_heads"),
        "head_dim": ("head_dim", "dim_head", "d_kv", "head_size", "kv_channels", "d_head", "attention_head_size"),
        "dropout": ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "dropout"),
        "qkv_bias": ("attention_bias", "qkv_bias", "bias"),
        "context_length": ("max_position_embeddings", "n_positions", "block_size", "context_length"),
        "vocab_size": ("vocab_size",),
        "rope_base": ("rope_theta", "theta", "rope_base", "base", "theta_base"),
        # a declared scale: a dimension whose inverse square root scales the scores, or the factor itself
        "scale_dim": ("query_pre_attn_scalar", "attention_scores_scalar"),
        "scale": ("attention_multiplier",),
        "clip": ("clip_qkv",),  # the bound queries, keys and values are clamped to (OLMo's)
        "num_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
                       "num_encoder_layers", "num_decoder_layers"),
        "fused_groups": ("mp_num",),  # the groups a fused qkv is laid out in (CodeGen's model-parallel groups)
    },
)
