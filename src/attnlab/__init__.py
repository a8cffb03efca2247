"""attnlab: see what a change to self-attention does, stage by stage."""

from attnlab.app.api import Result, run
from attnlab.capture.recorder import tap
from attnlab.modules.built import create_variant
from attnlab.modules.discovery import variant
from attnlab.modules.registry import list_variants

__all__ = ["Result", "create_variant", "list_variants", "run", "tap", "variant"]
