"""Loading a model to run in, offline only: nothing is downloaded and nothing is unpickled.

Hugging Face models come from their config class (`hf:TYPE`, random weights), a saved folder
(`path`, `local_files_only`, safetensors only) or the local cache (`hub`). A model of your own is
a class in ./models/NAME.py (attnlab.model.user_models) with a safetensors state_dict.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.model.model_memory import check_weights_fit
from attnlab.model.model_spec import ModelSpec
from attnlab.model.saved_folder import check_saved_folder
from attnlab.model.tokens import GPT2_VOCAB, Tokenizer, gpt2_tokenizer, hf_tokenizer
from attnlab.model.user_models import build_user_model
from attnlab.modules import session
from attnlab.modules.families import family
from attnlab.modules.roles import manual_seed

INSTALL_HF = "pip install -e '.[hf]'"
CACHE_HINT = "huggingface-cli download {repo} (or: hf download {repo}), once, with a network"
# the whole models attnlab runs, by the transformers auto class that builds each
TASKS = {"causal": "AutoModelForCausalLM", "seq2seq": "AutoModelForSeq2SeqLM",
         "image": "AutoModelForImageClassification"}


@dataclass
class LoadedModel:
    module: nn.Module
    label: str  # hf:gpt2, the folder, the repo id or the class of your own
    tokenizer: Tokenizer
    hf: bool  # a Hugging Face PreTrainedModel: called with input_ids=, use_cache=False
    config: Any  # its config object (a PretrainedConfig, your dataclass or dict), for the layer sizes
    task: str = "causal"  # which whole model it is, one of TASKS: what it is given (attnlab.model.inputs)

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


@contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """`module` in eval mode, each submodule's own mode put back after, whatever happened: an
    in-memory model is the user's own object, run without a copy (its layers are swapped in place
    and put back by attnlab.model.forward.replaced)."""
    modes = [(each, each.training) for each in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for each, training in modes:
            each.training = training


def load_model(spec: ModelSpec, seed: int = 0) -> LoadedModel:
    """The model in eval mode (an in-memory one: as it is, run under `evaluating`), float32, on the
    CPU; random weights (hf:TYPE, a class of your own without weights) drawn right after the seed,
    so a run is repeatable."""
    manual_seed(seed)
    if spec.kind == "user":
        module, config = build_user_model(spec)
        # an in-memory Hugging Face model is called as one (use_cache=False whatever its config says)
        hf = any(cls.__name__ == "PreTrainedModel" for cls in type(module).__mro__)
        loaded = LoadedModel(module, spec.label, gpt2_tokenizer(), hf=hf, config=config)
        if session.holds_model(spec.label):  # the user's object: in eval mode only while it runs (evaluating)
            return loaded
    else:
        loaded = _kept_saved(spec) or _load_hf(spec)
    loaded.module.eval()
    return loaded


# the saved model loaded last, by its request and its files: a sweep's jobs, one after another in a
# job worker, load it once (every edit and swap puts the model back as it found it: forward.replaced)
_last_saved: tuple[tuple[object, ...], LoadedModel] | None = None


def _kept_saved(spec: ModelSpec) -> LoadedModel | None:
    """The model a saved folder (`model.path`) holds, loaded once per process while its files stay as they were."""
    global _last_saved
    if spec.kind != "path" or spec.path is None or not spec.path.is_dir():
        return None
    files = tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in spec.path.iterdir() if f.is_file()))
    key = (repr(spec), str(spec.path.resolve()), files)
    if _last_saved is None or _last_saved[0] != key:
        _last_saved = None  # the one before let go first: two models are never held at once
        _last_saved = (key, _load_hf(spec))
    return _last_saved[1]


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UserError(f"model=: Hugging Face models need transformers: {INSTALL_HF}") from None
    transformers.logging.set_verbosity_error()  # its notices (e.g. on loss_type) are not the user's concern
    transformers.utils.logging.disable_progress_bar()  # attnlab's own progress display says what runs
    return transformers


def _load_hf(spec: ModelSpec) -> LoadedModel:
    transformers = _transformers()
    if spec.kind == "hf":
        config = hf_config(spec)
        task = _task(transformers, config, spec)
        auto = getattr(transformers, TASKS[task])
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
    source = _saved_source(spec)
    where = f"{spec.key}.path={source}" if spec.kind == "path" else f"{spec.key}.hub={spec.hub}"
    check_saved_folder(Path(source), where, transformers.models.auto.configuration_auto.CONFIG_MAPPING)
    check_weights_fit(sum(f.stat().st_size for f in Path(source).glob("*.safetensors")), spec.label)
    try:
        config = transformers.AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=False)
        task = _task(transformers, config, spec)
        module = _loader(transformers, config, task).from_pretrained(
            source, local_files_only=True, use_safetensors=True, trust_remote_code=False,
            attn_implementation=spec.attn_implementation)
    except OSError as exc:
        raise UserError(_missing(spec, exc)) from None
    except ValueError as exc:
        raise UserError(f"{spec.key}: {spec.label}: {str(exc).splitlines()[0]}") from None
    return LoadedModel(module, spec.label, hf_tokenizer(transformers, source) or gpt2_tokenizer(), hf=True,
                       config=module.config, task=task)


def _declared_causal_lm(transformers: Any, config: Any) -> Any:
    """The causal LM class a saved config names in its `architectures`, for a config no auto class
    maps (Emu3ForCausalLM of Emu3TextConfig, Mllama's text model); None: none."""
    for name in getattr(config, "architectures", None) or ():
        cls = getattr(transformers, name, None) if name.endswith("ForCausalLM") else None
        if cls is not None and getattr(cls, "config_class", None) is type(config):
            return cls
    return None


def _loader(transformers: Any, config: Any, task: str) -> Any:
    """The auto class of the task where it maps the config, else the class the config names."""
    auto = getattr(transformers, TASKS[task])
    return auto if type(config) in auto._model_mapping else _declared_causal_lm(transformers, config)


def _task(transformers: Any, config: Any, spec: ModelSpec) -> str:
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


def _saved_source(spec: ModelSpec) -> str:
    """The folder the weights are in: `model.path`, or the cached snapshot of `model.hub` (never fetched)."""
    folder = spec.path if spec.kind == "path" and spec.path is not None else _cached_snapshot(spec)
    if not (folder / "config.json").is_file():
        raise UserError(f"{spec.key}.path={folder}: no config.json there (a folder written by save_pretrained)")
    if not list(folder.glob("*.safetensors")):
        pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt*")]
        what = f"only pickled weights ({', '.join(pickled)}), which attnlab never loads" if pickled else "no weights"
        raise UserError(f"{spec.key}.path={folder}: {what}; save them with model.save_pretrained(DIR) "
                        f"(safetensors is its default)")
    return str(folder)


def _cached_snapshot(spec: ModelSpec) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    assert spec.hub is not None  # a saved model that is not model.path: model.hub
    try:
        return Path(snapshot_download(spec.hub, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise UserError(_missing(spec, None)) from None


def _missing(spec: ModelSpec, exc: OSError | None) -> str:
    if spec.kind == "hub":
        return (f"{spec.key}.hub={spec.hub}: not in the local Hugging Face cache (attnlab never downloads); "
                f"get it with: {CACHE_HINT.format(repo=spec.hub)}")
    return f"{spec.key}.path={spec.path}: {str(exc).splitlines()[0]}"

