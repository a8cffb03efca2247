"""Memory pre-flight for a run inside a model: the model itself, its forward, one compared layer's stages."""

from __future__ import annotations

from attnlab.compute.memory import BASE_BYTES, Size, _gib, available_bytes, estimate_peak_bytes
from attnlab.errors import UserError
from attnlab.model.effect import CHUNK
from attnlab.model.sizes import ModelSizes

SHRINK = "e.g. model.hidden_size=64 model.num_hidden_layers=2 model.max_position_embeddings=512"


def model_peak_bytes(n_parameters: int, sizes: ModelSizes, n_tokens: int, kept_layers: int, batch: int = 1) -> int:
    """The parameters; the forward's activations (an eager layer's weights and a few hidden-state
    sized tensors); one layer's captured stages, both modules (attnlab.compute.memory); the kept
    (1, T, d) hidden states (`kept_layers` of them: layer inputs, changed runs, replayed blocks); two
    chunks of log-probabilities; a Hugging Face model's own (1, T, vocab) logits, three of them (the
    unmodified run's, a changed run's, the forward's own). Sized at the text, never at the model's
    context: the variant's mask is the text's (attnlab.model.sizes.constructor_values). Each
    of `batch` texts has its own activations, stages, hidden states and logits."""
    size = Size(batch, sizes.heads, n_tokens, sizes.width, sizes.width, context_length=n_tokens)
    forward = batch * (2 * sizes.heads * n_tokens**2 * 4 + 16 * n_tokens * sizes.width * 4)
    kept = batch * (kept_layers + 2) * n_tokens * sizes.width * 4
    logits = (4 * CHUNK + 3 * batch * n_tokens) * (sizes.vocab or 0) * 4
    return n_parameters * 4 + forward + estimate_peak_bytes(size, spilled=False) + kept + logits


def check_model_fits(n_parameters: int, sizes: ModelSizes, n_tokens: int, kept_layers: int, batch: int = 1) -> None:
    need = model_peak_bytes(n_parameters, sizes, n_tokens, kept_layers, batch)
    limit, source = available_bytes()
    if need > limit:
        raise UserError(f"this run needs about {_gib(need)} (a model of {n_parameters / 1e6:.1f}M parameters, "
                        f"{batch} x {sizes.heads} heads x {n_tokens}² tokens) but {_gib(limit)} is available ({source}); "
                        f"shorten inputs.text, compare fewer layers or shrink the model ({SHRINK})")


def check_weights_fit(n_bytes: int, what: str, sized: bool = False) -> None:
    """Before a model is loaded: its weights alone (float32) must fit beside the interpreter.
    `sized`: built from a config class, so its size keys can shrink it."""
    need = n_bytes + BASE_BYTES
    limit, source = available_bytes()
    if need > limit:
        raise UserError(f"{what}: its weights alone need about {_gib(need)} but {_gib(limit)} is available ({source})"
                        + (f"; shrink it ({SHRINK})" if sized else ""))
