"""Training runs per variant from one start: a tiny GPT whose every attention layer is the variant,
trained beside the reference from the same weights, evaluated teacher-forced and causally, with a
verdict in words (docs/guide/training.md). From Python: `attnlab.train(...)`."""
