"""Deliberate changes to attention, named from the captured stages.

Rotary positions, a bias on the query-key distance (ALiBi), a sliding window, soft-capped
scores, normalised queries and keys: none of them is a bug, but each makes the stages differ
from the reference's, and the plain checks would call that a wrong query source or a wrong
scaling. Each recogniser here compares the variant's stages with the reference's and names
the change when the numbers fit it — never by the variant's name — so a user's own
implementation gets the same words as the built-in plugin.

A change applied wrongly is not recognised as the change: RoPE on the values too, or on the
queries but not the keys, is an error finding (`rotary_misapplied`); a window or a bias that
does not fit is left to the mask and scaling checks. Linear attention never makes its weights;
when its context equals a kernel attention of the queries and keys, `not_softmax` (an error:
it is the `plain_normalisation` bug) says what the weights are instead.

Each recogniser is a check whose codes are declared beside it (`attnlab.diagnosis.finding_code`);
`attnlab.diagnosis.codes` runs them first, since each would otherwise read as a wrong source or scale.

By what they read: `positions` (rotary, QK-norm; `rotation` and `norms` fit them), `biases`
(a window, a distance bias, a term the class adds itself), `logits` (a soft cap, a declared scale), `kernel_attention` (no softmax), `clipping` (a declared clamp of the
projections), `cosine` (unit-length queries and keys), `latent` (keys and values from a
shared latent, MLA), `sparse_keys` (each query's top-k keys by a selector of the class's own, DSA), `xpos` (rotary with a
per-position scale), `sinks` (a learned logit column joined to the softmax), `gates` (an output gate
from a projection's own columns), `added_positions` (absolute position embeddings added before the
query and key projections, DETR's), `query_scale` (queries scaled per column by a learned vector).
"""

from attnlab.diagnosis.recognisers.added_positions import added_positions
from attnlab.diagnosis.recognisers.biases import position_bias, score_terms, window
from attnlab.diagnosis.recognisers.clipping import clipped_qkv
from attnlab.diagnosis.recognisers.cosine import cosine_attention
from attnlab.diagnosis.recognisers.gates import output_gate
from attnlab.diagnosis.recognisers.kernel_attention import linear_attention
from attnlab.diagnosis.recognisers.latent import latent_attention
from attnlab.diagnosis.recognisers.logits import declared_scale, softcap
from attnlab.diagnosis.recognisers.positions import qk_norm, rotary
from attnlab.diagnosis.recognisers.query_scale import query_scale
from attnlab.diagnosis.recognisers.sinks import attention_sinks
from attnlab.diagnosis.recognisers.sparse_keys import sparse_keys
from attnlab.diagnosis.recognisers.xpos import xpos

__all__ = ["added_positions", "attention_sinks", "clipped_qkv", "cosine_attention", "declared_scale", "latent_attention", "linear_attention", "output_gate", "position_bias", "qk_norm", "query_scale", "rotary", "score_terms",
           "softcap", "sparse_keys", "window", "xpos"]
