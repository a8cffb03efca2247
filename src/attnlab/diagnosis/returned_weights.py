"""What a module's forward returned besides its output, checked against what was captured.

Hugging Face's attention classes return (output, attention weights); the weights they return
must be the weights the capture saw (the module's own softmax output). A mismatch is said: it
means the capture read another tensor as the weights, or the module returns something else.
"""

from __future__ import annotations

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.diagnostics import max_abs_diff, stage_tolerance


def returned_weights(captured: Capture) -> str | None:
    """One phrase on the attention weights the module returned, None when it returned none."""
    call = captured.call
    if call is None or call.weights is None:
        return None
    weights = captured.stages.get("weights")
    if weights is None:
        return "returned, but no weights were captured to compare them with"
    returned = call.weights.to(weights.dtype)  # (b, num_heads, num_tokens, num_tokens)
    if returned.shape != weights.shape:
        return f"of shape {tuple(returned.shape)}, not the captured weights' {tuple(weights.shape)}"
    gap = max_abs_diff(returned, weights)
    if gap == 0.0:
        return "equal to the captured weights"
    if gap <= stage_tolerance("weights", captured):
        return f"equal to the captured weights within rounding ({gap:.3g})"
    return f"differ from the captured weights by up to {gap:.3g}"


__all__ = ["returned_weights"]
