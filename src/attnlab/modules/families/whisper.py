"""Whisper: BART's construction; attnlab runs its text decoder (WhisperForCausalLM)."""

from attnlab.modules.families.adapter import BY_SIZE, MASK, Family

ADAPTER = Family("whisper", "model.decoder.layers.{i}.self_attn", out_proj="out_proj", final_norm="model.decoder.layer_norm",
                 mask="bidirectional", arguments=MASK,
                 spellings={"d_in": ("d_model", "embed_dim"), "num_heads": ("encoder_attention_heads",)},
                 constructor=BY_SIZE, model_spellings={"num_heads": ("decoder_attention_heads",), "num_kv_heads": ("decoder_attention_heads",),
                                  "num_layers": ("decoder_layers",)})
