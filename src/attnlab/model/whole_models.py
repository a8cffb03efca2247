"""Which whole model a Hugging Face config is, one of the kinds attnlab runs, and the class that builds it."""

from __future__ import annotations

from typing import Any

from attnlab.errors import UserError
from attnlab.model.model_spec import ModelSpec
from attnlab.modules.families import family

# the whole models attnlab runs, by the transformers auto class that builds each
TASKS = {"causal": "AutoModelForCausalLM", "seq2seq": "AutoModelForSeq2SeqLM",
         "image": "AutoModelForImageClassification"}


def model_task(transformers: Any, config: Any, spec: ModelSpec) -> str:
    """The whole model of the config (an encoder–decoder's own before the causal LM of its decoder
    alone, BART's); any other kind refused in one short line (transformers' own message lists
    every config of the auto class, thousands of characters)."""
    kinds: tuple[str, ...] = ("seq2seq", "causal") if getattr(config, "is_encoder_decoder", False) else ("causal",)
    # an image classifier whose tokens are a class token then the patches, as attnlab.model.inputs labels them
    kinds += ("image",) if family(config.model_type).task == "image" else ()
    for kind in kinds:
        if type(config) in getattr(transformers, TASKS[kind])._model_mapping:
            return kind
    if _declared_causal_lm(transformers, config) is not None:
        return "causal"
    raise UserError(f"{spec.key}={spec.label}: {type(config).__name__} is no causal LM, seq2seq LM or ViT classifier, "
                    f"the whole models attnlab runs; its attention alone: variant=hf:{config.model_type}")


def model_loader(transformers: Any, config: Any, task: str) -> Any:
    """The auto class of the task where it maps the config, else the class the config names."""
    auto = getattr(transformers, TASKS[task])
    return auto if type(config) in auto._model_mapping else _declared_causal_lm(transformers, config)


def _declared_causal_lm(transformers: Any, config: Any) -> Any:
    """The causal LM class a saved config names in its `architectures`, for a config no auto class
    maps (Emu3ForCausalLM of Emu3TextConfig, Mllama's text model); None: none."""
    for name in getattr(config, "architectures", None) or ():
        cls = getattr(transformers, name, None) if name.endswith("ForCausalLM") else None
        if cls is not None and getattr(cls, "config_class", None) is type(config):
            return cls
    return None
