"""Loading a model to run in, offline only: nothing is downloaded and nothing is unpickled.

Hugging Face models come from their config class (`hf:TYPE`, random weights), a saved folder
(`path`, `local_files_only`, safetensors only) or the local cache (`hub`). A model of your own is
a class in ./models/NAME.py (attnlab.model.user_models) with a safetensors state_dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.model.model_memory import check_weights_fit
from attnlab.model.model_spec import ModelSpec
from attnlab.model.request import ModelRequest
from attnlab.model.saved_folder import missing, saved_source
from attnlab.model.tokens import GPT2_VOCAB, Tokenizer, gpt2_tokenizer, hf_tokenizer
from attnlab.model.user_models import build_user_model
from attnlab.model.whole_models import TASKS, model_loader, model_task
from attnlab.modules import session
from attnlab.modules.roles import manual_seed

INSTALL_HF = "pip install -e '.[hf]'"


@dataclass
class LoadedModel:
    module: nn.Module
    label: str  # hf:gpt2, the folder, the repo id or the class of your own
    tokenizer: Tokenizer
    hf: bool  # a Hugging Face PreTrainedModel: called with input_ids=, use_cache=False
    config: Any  # its config object (a PretrainedConfig, your dataclass or dict), for the layer sizes
    task: str = "causal"  # which whole model it is (attnlab.model.whole_models): what it is given (attnlab.model.inputs)

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


def load_models(request: ModelRequest, config: Any = None) -> tuple[LoadedModel, LoadedModel | None]:
    """The run's model and the learner's check's reference model (None: no check), each loaded right
    after the seed (hf:TYPE's from `config`, the one its check declared)."""
    models = []
    for spec in request.models:
        models.append(load_model(spec, request.seed, config if spec is request.model else None))
    return models[0], models[1] if len(models) > 1 else None


def load_model(spec: ModelSpec, seed: int = 0, config: Any = None) -> LoadedModel:
    """The model in eval mode (an in-memory one: as it is, run under attnlab.model.model_job.evaluating), float32, on the
    CPU; random weights (hf:TYPE, a class of your own without weights) drawn right after the seed,
    so a run is repeatable. `config`: hf:TYPE's config object where it is built already."""
    if spec.kind != "user":
        loaded = _kept_saved(spec, seed, config)
        loaded.module.eval()
        return loaded
    manual_seed(seed)
    module, own_config = build_user_model(spec)
    # an in-memory Hugging Face model is called as one (use_cache=False whatever its config says)
    hf = any(cls.__name__ == "PreTrainedModel" for cls in type(module).__mro__)
    if not session.holds_model(spec.label):  # the user's object: in eval mode only while it runs (evaluating)
        module.eval()
    return LoadedModel(module, spec.label, gpt2_tokenizer(), hf=hf, config=own_config)


# the saved model loaded last, by its request and its files: a sweep's jobs, one after another in a
# job worker, load it once (every edit and swap puts the model back as it found it: forward.replaced)
_last_saved: tuple[tuple[object, ...], LoadedModel] | None = None


def _kept_saved(spec: ModelSpec, seed: int, config: Any) -> LoadedModel:
    """The model; the one a saved folder (`model.path`) holds loaded once per process while its files
    stay as they were."""
    global _last_saved
    key = _saved_key(spec)
    if key is not None and _last_saved is not None and _last_saved[0] == key:
        return _last_saved[1]
    if key is not None:
        _last_saved = None  # the one before let go first: two models are never held at once
    loaded = _load_hf(spec, seed, config)
    if key is not None:
        _last_saved = (key, loaded)
    return loaded


def _saved_key(spec: ModelSpec) -> tuple[object, ...] | None:
    """A saved folder's request and files (names, sizes, times); None: no saved folder."""
    if spec.kind != "path" or spec.path is None or not spec.path.is_dir():
        return None
    files = tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in spec.path.iterdir() if f.is_file()))
    return (repr(spec), str(spec.path.resolve()), files)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UserError(f"model=: Hugging Face models need transformers: {INSTALL_HF}") from None
    transformers.logging.set_verbosity_error()  # its notices (e.g. on loss_type) are not the user's concern
    transformers.utils.logging.disable_progress_bar()  # attnlab's own progress display says what runs
    return transformers


def _load_hf(spec: ModelSpec, seed: int, config: Any = None) -> LoadedModel:
    transformers = _transformers()
    if spec.kind == "hf":
        config = config if config is not None else hf_config(spec)
        task = model_task(transformers, config, spec)
        auto = getattr(transformers, TASKS[task])
        manual_seed(seed)
        with torch.device("meta"):  # counted without memory: a model too large is refused before it is built
            counted = auto.from_config(config)
        check_weights_fit(4 * sum(p.numel() for p in counted.parameters()), spec.label, sized=True)
        try:
            module = auto.from_config(config, attn_implementation=spec.attn_implementation)
        except ValueError as exc:  # an attention implementation it lacks
            raise UserError(f"{spec.key}=hf:{spec.name}: {str(exc).splitlines()[0][:160]}") from None
        return LoadedModel(module, spec.label, gpt2_tokenizer(), hf=True, config=module.config, task=task)
    if spec.sizes:
        raise UserError(f"{spec.key}.{next(iter(spec.sizes))}: sizes are for {spec.key}=hf:TYPE; "
                        f"a saved model keeps its own config")
    source = saved_source(spec, transformers.models.auto.configuration_auto.CONFIG_MAPPING)
    manual_seed(seed)
    try:
        config = transformers.AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=False)
        task = model_task(transformers, config, spec)
        module = model_loader(transformers, config, task).from_pretrained(
            source, local_files_only=True, use_safetensors=True, trust_remote_code=False,
            attn_implementation=spec.attn_implementation)
    except OSError as exc:
        raise UserError(missing(spec, exc)) from None
    except ValueError as exc:
        raise UserError(f"{spec.key}: {spec.label}: {str(exc).splitlines()[0]}") from None
    return LoadedModel(module, spec.label, hf_tokenizer(transformers, source) or gpt2_tokenizer(), hf=True,
                       config=module.config, task=task)


def hf_config(spec: ModelSpec) -> Any:
    """The config class of `hf:TYPE` built with the size keys (derived sizes such as Llama's head_dim
    follow them)."""
    transformers = _transformers()
    try:
        default = transformers.AutoConfig.for_model(spec.name)
    except ValueError:
        raise UserError(f"{spec.key}=hf:{spec.name}: not a Hugging Face model type (e.g. hf:gpt2, hf:llama, "
                        f"hf:mistral, hf:qwen3)") from None
    # attributes a config does not have are accepted silently by Hugging Face: a typo would be lost
    for key in spec.sizes:
        if not hasattr(default, key):
            raise UserError(f"{spec.key}.{key}: not an attribute of {type(default).__name__}")
    sizes = dict(spec.sizes)
    if hasattr(default, "vocab_size"):
        sizes.setdefault("vocab_size", GPT2_VOCAB)  # the text is GPT-2 BPE: every id must have a row
        if isinstance(default.pad_token_id, int) and default.pad_token_id >= sizes["vocab_size"]:
            sizes.setdefault("pad_token_id", None)  # SmolLM3's 128004: a padding row past the smaller vocabulary
    if default.is_encoder_decoder and getattr(default, "decoder_start_token_id", None) is None:
        sizes.setdefault("decoder_start_token_id", default.pad_token_id)  # T5's convention: its decoder starts at pad
    return transformers.AutoConfig.for_model(spec.name, **sizes)
