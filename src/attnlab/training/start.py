"""The reference's model and the variant's from one start: the same seed builds the reference, the
variant takes every parameter outside attention by name and its attention parameters through
attnlab's layouts (`align`, as forward runs share weights), whatever the variant's layout."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.modules.layouts import align, seed_projections
from attnlab.modules.roles import declared_count, manual_seed
from attnlab.training.counterparts import Counterpart
from attnlab.training.gpt import GPTModel
from attnlab.training.settings import TrainingConf


@dataclass
class Pair:
    reference: GPTModel
    variant: GPTModel
    loaded: dict[str, str]  # "layer<i>.<parameter>": how the variant's attention parameter was loaded


def build(counterpart: Counterpart, vocab: int, settings: TrainingConf) -> GPTModel:
    sizes = settings.model
    return GPTModel(vocab, sizes.context_length, sizes.d_model, sizes.n_layers, counterpart.make, counterpart.positions,
                    counterpart.d_out or None)


def same_start(reference: Counterpart, variant: Counterpart, vocab: int, settings: TrainingConf, seed: int) -> Pair:
    """Both models at the reference's initial parameters; `settings.init="normal"` first redraws the
    reference's query/key/value weights as attnlab's weights_init=normal (unit-variance q.k)."""
    heads = settings.model.num_heads
    manual_seed(seed)
    reference_model = build(reference, vocab, settings)
    if settings.init == "normal":
        for layer, attention in enumerate(reference_model.attention_layers()):
            seed_projections(attention, seed + layer, "normal", num_heads=heads)
    manual_seed(seed)
    variant_model = build(variant, vocab, settings)
    own = variant_model.state_dict()
    outside = {name: value for name, value in reference_model.state_dict().items() if ".att." not in name and name in own}
    variant_model.load_state_dict(outside, strict=False)
    loaded: dict[str, str] = {}
    for layer, (theirs, mine) in enumerate(zip(reference_model.attention_layers(), variant_model.attention_layers())):
        report = align(theirs, mine, num_heads=heads, num_kv_heads=declared_count(mine, "num_kv_heads"))
        loaded |= {f"layer{layer}.{name}": how for name, how in report.items()}
    return Pair(reference_model, variant_model, loaded)
