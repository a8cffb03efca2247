"""One model type surveyed in-process: `variant=hf:TYPE` at the issue's small sizes, its outcome
classified from what attnlab said (a status, findings, a one-line refusal) or a Python exception."""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from attnlab.app.api import Result

from attnlab.modules.hf_find import NO_ATTENTION

OVERRIDES = ("inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4")
# outcome classes, best first: the page's order
OUTCOMES = ("ok", "error_finding", "no_attention_class", "composite", "cannot_build", "missing_input", "refused",
            "crash", "timeout", "no_attention")
# a refusal's class, by the words of attnlab's one-line message (the first that matches)
_REFUSALS = ((NO_ATTENTION, "no_attention"), ("no attention class", "no_attention_class"), ("composite config", "composite"),
             ("could not be built", "cannot_build"), ("cannot be built", "cannot_build"),
             ("cannot provide", "missing_input"), ("needs an input", "missing_input"))


@dataclass
class Row:
    """One type's line of the conformance table."""

    type: str
    cls: str = ""
    outcome: str = "crash"
    # its model builds an attention nn.Module its modeling module defines (the 727): not a type whose
    # model has none (a convolutional network, a vocoder), even where its module defines another model's
    defines_attention: bool = False
    info: list[str] = field(default_factory=list)  # declared differences: info findings, code@stage
    errors: list[str] = field(default_factory=list)  # error findings, code@stage
    seconds: float = 0.0
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def refusal(message: str) -> str:
    """A one-line refusal's outcome class."""
    return next((outcome for words, outcome in _REFUSALS if words in message), "refused")


def survey_one(model_type: str) -> Row:
    """`variant=hf:TYPE` run once, classified; never raises (a crash is a row)."""
    import attnlab
    from attnlab.errors import UserError

    row = Row(model_type, defines_attention=_defines_attention(model_type), cls=_class_name(model_type))
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = attnlab.run(f"hf:{model_type}", overrides=list(OVERRIDES))
    except UserError as exc:
        row.outcome, row.message = refusal(str(exc)), _line(str(exc))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a crash, named (transformers' OptionalDependencyNotAvailable too)
        row.outcome, row.message = "crash", _line(f"{type(exc).__name__}: {exc}")
    else:
        record = cast("Result", result).record  # one seed, one layer: one Result
        row.info = [f"{f.code}@{f.stage}" for f in record.findings if f.severity != "error"]
        row.errors = [f"{f.code}@{f.stage}" for f in record.findings if f.severity == "error"]
        if record.status != "ok":
            row.outcome, row.message = refusal(record.error or ""), _line(record.error or record.status)
        else:
            row.outcome = "error_finding" if row.errors else "ok"
            row.message = _line("; ".join(record.notes))  # ok at a token count of its own: said why
    row.defines_attention = row.defines_attention and row.outcome != "no_attention"
    row.seconds = round(time.perf_counter() - start, 2)
    return row


def _line(message: str) -> str:
    return " ".join(message.split())[:300]


def _defines_attention(model_type: str) -> bool:
    from attnlab.modules.hf_find import attention_classes, config_class_of, modeling_module

    try:
        modeling = modeling_module(config_class_of(model_type))
    except Exception:  # noqa: BLE001 - a type whose module does not import defines nothing we can run
        return False
    return modeling is not None and bool(attention_classes(modeling))


def _class_name(model_type: str) -> str:
    from attnlab.modules.hf import attention_class

    try:
        return attention_class(model_type)[0].__name__
    except Exception:  # noqa: BLE001 - the run names why
        return ""
