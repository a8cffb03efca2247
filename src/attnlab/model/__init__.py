"""Attention inside a whole model: load it, find its attention layers, run a variant in one, measure the effect."""
