"""attnlab: see what a change to self-attention does, stage by stage."""

from attnlab.registry import create_variant, list_variants, variant

__all__ = ["create_variant", "list_variants", "variant"]
