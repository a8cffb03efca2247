"""A tiny training setup shared by the training tests: a few steps take well under a second."""

from attnlab.training.settings import ModelSizes, TrainingConf

TINY_OVERRIDES = ["training.steps=40", "training.eval_every=20", "training.batch=16", "training.eval_batch=16",
                  "training.vocab=8", "training.warmup=5", "training.model.n_layers=1", "training.model.d_model=16",
                  "training.model.num_heads=2", "training.model.context_length=8"]


def tiny(**changes) -> TrainingConf:
    sizes = ModelSizes(n_layers=1, d_model=16, num_heads=2, context_length=8)
    settings = dict(steps=40, eval_every=20, batch=16, eval_batch=16, vocab=8, warmup=5, lr=1e-2, model=sizes)
    return TrainingConf(**{**settings, **changes})
