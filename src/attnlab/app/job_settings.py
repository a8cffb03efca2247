"""The composed config read once, at the edge, into the typed, frozen settings the layers below take:
a job's shared settings (attnlab.compute.pipeline.JobSpec), its inputs' values, a model run's request
with its model spec and edit (attnlab.model.request), a training request
(attnlab.training.settings.TrainingRequest) and the sinks' (attnlab.sinks.base.SinkSettings).
Each mistake is one line, as `attnlab.errors.UserError`; below the app nothing reads a DictConfig."""

from __future__ import annotations

import difflib
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnlab.app.config_values import container, plain, resolved
from attnlab.compute.pipeline import JobSpec, resolved_device
from attnlab.errors import UserError
from attnlab.inputs.kinds import inputs_error
from attnlab.model.interventions import intervention
from attnlab.model.model_spec import OWN_KEYS, is_requested, model_spec
from attnlab.model.request import ModelRequest, ModelTexts
from attnlab.schema import WeightsMode
from attnlab.sinks.base import SinkSettings, enabled_sinks, unbuildable
from attnlab.training.settings import ModelSizes, TrainingConf, TrainingRequest

MODEL_NAMED = "model=hf:TYPE, model.path=DIR, model.hub=REPO_ID or model=NAME"


def _block(cfg: DictConfig, key: str) -> dict[str, Any]:
    node = OmegaConf.select(cfg, key, default=None)
    return container(node) if node is not None else {}


def wants_model(cfg: DictConfig) -> bool:
    return is_requested(_block(cfg, "model"))


def check_unused(cfg: DictConfig) -> None:
    """`layer`, `reference_model` and any `model.*` key mean something only inside a model."""
    wanted = wants_model(cfg)
    stray = next((k for k in _block(cfg, "model") if k not in ("name", "path", "hub")), None)
    if stray is not None and not wanted:
        close = difflib.get_close_matches(stray, OWN_KEYS, n=1, cutoff=0.6)
        hint = f"did you mean 'model.{close[0]}'?" if close else "a model key needs a model to run in"
        raise UserError(f"model.{stray}: unknown key without a model ({MODEL_NAMED}); {hint}")
    for key, used in (("layer", cfg.get("layer") is not None), ("reference_model", bool(_block(cfg, "reference_model"))),
                      ("intervene", bool(_block(cfg, "intervene")))):
        if used and not wanted:
            raise UserError(f"{key}: only with a model to run in ({MODEL_NAMED})")


def model_request(cfg: DictConfig, checking: bool = False) -> ModelRequest:
    """The run inside a model: the model, the device, the edit and the reference model, each checked
    in this order (the rest, which reads the model's declared config, is attnlab.model.model_job's).
    `checking`: for the checks alone, the config its records keep left unresolved (a sweep checks
    every job before Hydra has numbered them, so Hydra's own node cannot be resolved yet)."""
    spec = model_spec(_block(cfg, "model"))
    if cfg.device not in ("cpu", "auto"):  # auto: the CPU, as every model run
        raise UserError(f"device={cfg.device}: a run inside a model runs on the CPU for now; device=cpu")
    edit = intervention(_block(cfg, "intervene"))
    checked = is_requested(_block(cfg, "reference_model"))
    if edit is not None and checked:
        raise UserError("intervene: edits one model's layers; the learner's check (reference_model=) compares two")
    inputs = container(cfg.inputs)
    if inputs.get("texts") is not None and checked:
        raise UserError("inputs.texts: the learner's check (reference_model=) runs on one text: inputs.text=\"...\"")
    reference_model = model_spec(_block(cfg, "reference_model"), "reference_model") if checked else None
    texts = inputs.get("texts")
    given = ModelTexts(kind=inputs.get("kind"), text=inputs.get("text"),
                       texts=None if texts is None else tuple(texts), ids=inputs.get("ids"),
                       max_tokens=inputs.get("max_tokens"))
    return ModelRequest(model=spec, reference_model=reference_model, edit=edit, layer=plain(cfg.get("layer")),
                        variant=cfg.variant.name, params=container(cfg.variant.params), reference=cfg.reference,
                        expect=container(cfg.expect), seed=cfg.seed, n_seeds=cfg.n_seeds, inputs=given,
                        config={} if checking else resolved(cfg))


def job_spec(cfg: DictConfig) -> JobSpec:
    """What every seed of a job shares, read from the config once: resolving a DictConfig is
    slow next to a book-size seed, and 100 seeds should not pay for it 100 times."""
    values = {key: cfg[key] for key in ("d_out", "context_length", "dropout", "num_heads", "num_kv_heads",
                                        "qkv_bias", "attn_implementation")}
    return JobSpec(
        name=cfg.variant.name,
        params=container(cfg.variant.params),
        config=resolved(cfg),
        shared=cfg.weights == WeightsMode.shared,
        weights_init=cfg.weights_init.value,
        d_out=cfg.d_out,
        expect=container(cfg.expect),
        values=values,
        batch=cfg.batch,
        train=cfg.train,
        reference=cfg.reference,
        reference_params=container(cfg.reference_params),
        show=(cfg.show.batch, cfg.show.head),
        dtype=cfg.dtype,  # names attnlab.schema has checked against DTYPES
        reference_dtype=cfg.reference_dtype,
        device=resolved_device(cfg.device),
        profile=cfg.profile,
        profile_budget_s=float(cfg.profile_budget_s),  # in (0, 3600]: attnlab.schema
        profile_backward=cfg.profile_backward,
    )


def inputs_values(cfg: DictConfig) -> dict[str, Any]:
    """The `inputs` group's values (its `_target_` factory and its fields) as plain data, resolved
    once for every seed (attnlab.inputs.kinds.make_inputs); one that cannot be read is one line."""
    try:
        return container(cfg.inputs)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a resolver of yours in its values
        raise inputs_error(OmegaConf.select(cfg, "inputs._target_"), exc) from None


def sink_settings(cfg: DictConfig) -> SinkSettings:
    """The `log.*` switches and every enabled sink's config, as plain data; a sink config that cannot
    be read is the one line of a sink that cannot be built."""
    configs = {}
    for name in enabled_sinks(cfg.get("sink") or {}, cfg.log):
        try:
            configs[name] = container(cfg.sink[name])
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a resolver of yours in its config: one line
            raise unbuildable(name, OmegaConf.select(cfg, f"sink.{name}._target_"), exc) from None
    return SinkSettings(log=container(cfg.log), configs=configs)


def training_settings(cfg: DictConfig) -> TrainingConf:
    """The config's `training` block as a TrainingConf (checked by attnlab.training.settings.check_settings)."""
    node = container(cfg.training)
    sizes = ModelSizes(**node.pop("model", {}))
    return TrainingConf(**node, model=sizes)


def training_request(cfg: DictConfig) -> TrainingRequest:
    return TrainingRequest(variant=cfg.variant.name, settings=training_settings(cfg), device=cfg.device,
                           seeds=range(cfg.seed, cfg.seed + cfg.n_seeds))
