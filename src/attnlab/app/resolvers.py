"""The resolvers attnlab's configs name (`${attnlab.new_dir:...}`, `${attnlab.run_name:...}`,
`${attnlab.job_dirname:...}`, `${attnlab.user_config:}`): a run's folder and its name, a sweep job's
folder name, the working folder's ./conf."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from pathlib import Path
from typing import Any

from omegaconf import ListConfig, OmegaConf

from attnlab.app.config_paths import user_config_searchpath
from attnlab.errors import UserError

JOB_DIRNAME_MAX = 120  # characters of a sweep job's folder name (file systems allow 255 bytes)


def new_dir(path: str) -> str:
    """`path` if nothing is there yet, else `path-2`, `path-3`, ...; the folder is created here.

    Why: a run's folder (and a sweep's) is named by the second it started, and two runs of one
    variant started in the same second (a shell loop with `&`) took the same folder, the second
    overwriting the first. Creating it with an exclusive mkdir makes the claim atomic between
    processes; the resolver is cached, and Hydra copies a sweep's resolver cache into every
    job's config (joblib and submitit workers included), so a run resolves its folder once.
    """
    if ".." in Path(path).parts:  # from a name in the template (variant.name): never outside runs/
        raise UserError(f"{path}: a folder attnlab names may not contain '..'")
    # a name from the template (`hf:gemma2`) may hold characters Windows refuses in a file name
    parent, name = os.path.split(path)
    path = os.path.join(parent, re.sub(r'[:*?"<>|]', "-", name))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    for suffix in itertools.chain([""], (f"-{n}" for n in itertools.count(2))):
        try:
            os.mkdir(path + suffix)
        except FileExistsError:
            continue
        return path + suffix
    raise AssertionError("unreachable")


def job_dirname(overrides: str) -> str:
    """A sweep job's folder name from its overrides, safe as one path component inside the sweep's folder.

    Why: Hydra names it from the override text as typed, so `inputs.path=x/../a.csv` wrote the job
    outside hydra.sweep.dir and a long value overflowed the file system's name limit. Separators and
    `..` are replaced and a long name cut; either adds a hash of the full text, so two jobs never
    share a folder. The full overrides stay in the job's .hydra/overrides.yaml (and its config in the record).
    """
    safe = re.sub(r"[^\w.,=+@%\[\]-]", "_", overrides, flags=re.ASCII).replace("..", "_")
    if safe == overrides and len(safe) <= JOB_DIRNAME_MAX:
        return safe
    digest = hashlib.sha1(overrides.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[:JOB_DIRNAME_MAX - 9]}-{digest}"


def run_name(variant: str, intervene: Any = None) -> str:
    """A single run's folder name: its variant's, or under an intervention its edit's
    (`ablate_head-head=3-mode=zero`, `scale_scores-head=2-factor=0.5`, `patch-head=0`): the variant
    is then the layer's own module, and every edit's folder would read `-reference`."""
    edit = dict(intervene or {})
    kind = edit.get("name")
    if not kind:
        return str(variant)
    from attnlab.model.edits import KINDS  # torch: not in a launcher's process, which resolves no run's name

    own = KINDS[kind].shown if kind in KINDS else ()
    shown = {"head": True, "mode": "mode" in own, "factor": "factor" in own, "function": True}
    words = [f"{key}={_word(edit[key])}" for key, wanted in shown.items() if wanted and edit.get(key) is not None]
    return "-".join([str(kind), *words])


def _word(value: Any) -> str:
    """An edit's setting in a folder name: a function by its name, a list of heads as `[0,3]` (no spaces)."""
    if isinstance(value, (list, tuple, ListConfig)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value).rpartition(":")[2]


def register_resolvers() -> None:
    """The resolvers, once per process (OmegaConf refuses a second registration of a name)."""
    if not OmegaConf.has_resolver("attnlab.new_dir"):
        OmegaConf.register_new_resolver("attnlab.new_dir", new_dir, use_cache=True)
        OmegaConf.register_new_resolver("attnlab.user_config", user_config_searchpath)
        OmegaConf.register_new_resolver("attnlab.job_dirname", job_dirname)
        OmegaConf.register_new_resolver("attnlab.run_name", run_name)
