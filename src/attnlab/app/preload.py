"""Imported once by the job forkserver (attnlab.app.isolation): what every job needs, so that each
job's process starts with it in memory instead of importing it again."""

import pandas  # noqa: F401 - the table sink's and the sweep table's (imported lazily elsewhere: a heavy import)
import PIL.Image  # noqa: F401 - the heatmaps'
import tensorboard.compat.proto.event_pb2  # noqa: F401 - the TensorBoard sink's event protos
import tensorboard.compat.proto.summary_pb2  # noqa: F401
import torch.utils.tensorboard.summary  # noqa: F401 - its histogram and custom-scalars helpers

import attnlab.reporting.job_heatmaps  # noqa: F401
from attnlab.app.job import run_job  # noqa: F401 - the job's code: inputs, modules, capture, diagnosis, sinks
from attnlab.modules.registry import discover

discover()  # the plugins, found and imported once for every job of the process
