"""Imported once by the job forkserver (attnlab.app.job_worker): what every job needs, so that each
job's process starts with it in memory instead of importing, compiling and warming it again.
tests/app/test_preload.py checks that a job imports nothing beyond it."""

import encodings.ascii  # noqa: F401 - the codec of the /proc reads (attnlab.app.lifeline, attnlab.process_state)
import gc
import resource  # noqa: F401 - the memory cap's (attnlab.compute.memory); the forkserver runs on Unix only

import crc32c  # noqa: F401 - the TensorBoard sink's checksum
import pandas  # noqa: F401 - the table sink's and the sweep table's (imported lazily elsewhere: a heavy import)
import PIL.Image  # noqa: F401 - the heatmaps'
import PIL.ImageFile  # noqa: F401
import tensorboard.compat.proto.event_pb2  # noqa: F401 - the TensorBoard sink's event protos
import tensorboard.compat.proto.summary_pb2  # noqa: F401
import tensorboard.plugins.custom_scalar.layout_pb2  # noqa: F401 - its custom-scalars layout
import tensorboard.plugins.hparams.api_pb2  # noqa: F401 - its HParams session
import tensorboard.plugins.hparams.metadata  # noqa: F401
import tensorboard.plugins.hparams.plugin_data_pb2  # noqa: F401
import tensorboard.plugins.text.summary_v2  # noqa: F401 - its text summaries
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

import attnlab.app.cli  # noqa: F401 - the `attnlab` command's script, run again in every job's process, imports it
import attnlab.app.job_task  # noqa: F401 - a job's task, sent to the job worker by reference
import attnlab.compute.memory  # noqa: F401
import attnlab.configured  # noqa: F401 - builds the sinks and inputs from their configs, imported lazily
import attnlab.reporting.aggregate  # noqa: F401
import attnlab.reporting.job_heatmaps  # noqa: F401
import attnlab.reporting.sweep_plots  # noqa: F401
import attnlab.sinks.html  # noqa: F401 - the built-in sinks (conf/sink/), built by name in every job
import attnlab.sinks.table  # noqa: F401
import attnlab.sinks.tensorboard  # noqa: F401
import attnlab.sinks.terminal  # noqa: F401
from attnlab.app.lifeline import end_with_command
from attnlab.app.run_job import run_job  # noqa: F401 - the job's code: inputs, modules, capture, diagnosis, sinks
from attnlab.modules.registry import discover


def warm_parsers() -> None:
    """The two ANTLR grammars a job parses with (OmegaConf's interpolations in the sinks' configs,
    Hydra's overrides in the TensorBoard sink's swept keys) build their lookup tables on first use:
    once here, instead of in every job's process."""
    OverridesParser.create().parse_overrides(["variant=reference,unscaled", "seed=1,2", "+variant.params.window=3"])
    config = OmegaConf.create({"log": {"images": True}, "sink": {"images": "${log.images}"}})
    OmegaConf.to_container(config, resolve=True)
    OmegaConf.select(config, "sink.images")


discover()  # the plugins, found and imported once for every job of the process
warm_parsers()
end_with_command()  # the server (the command's, shared by a launcher's processes) ends with the command, even by kill -9
gc.freeze()  # the server's objects: never traversed by a job's gc, so their pages are never copied
