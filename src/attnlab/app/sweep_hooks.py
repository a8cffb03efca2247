"""What attnlab's sweeper (hydra_plugins.attnlab_sweeper) calls in the app: `check` on every value
of a sweep before the first job, `check_job` on every job's values together, `finish` at its end.

The sweeper imports this module when a sweep runs, never at Hydra's plugin scan (which imports
every plugin in every app): one import statement, so the layer and cycle checks see the edge.
"""

from __future__ import annotations

from attnlab.app.run_job import check, check_job
from attnlab.app.sweep import finish

__all__ = ["check", "check_job", "finish"]
