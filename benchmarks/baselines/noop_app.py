"""The no-op Hydra app for the sweep figure: Hydra's own cost per job, and nothing else.

    python benchmarks/baselines/noop_app.py -m variant=a,b,c,d seed=1,2,3,4,5 hydra.sweep.dir=DIR
    NOOP_IMPORT_TORCH=1 python benchmarks/baselines/noop_app.py -m ...   (pays torch's import once)
"""

import os

import hydra
from omegaconf import DictConfig

if os.environ.get("NOOP_IMPORT_TORCH"):
    import torch  # noqa: F401


@hydra.main(config_path=None, config_name=None, version_base="1.3")
def app(cfg: DictConfig) -> None:
    pass


if __name__ == "__main__":
    app()
