"""Imported once by the job forkserver (attnlab.app.isolation): what every job needs, so that each
job's process starts with it in memory instead of importing it again."""

from attnlab.app.job import run_job  # noqa: F401 - the job's code: inputs, modules, capture, diagnosis, sinks
from attnlab.modules.registry import discover

discover()  # the plugins, found and imported once for every job of the process
