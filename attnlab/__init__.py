"""attnlab: see what a change to self-attention does, stage by stage."""

from attnlab.api import Result, run
from attnlab.registry import create_variant, list_variants, variant

__all__ = ["Result", "create_variant", "list_variants", "run", "variant"]
