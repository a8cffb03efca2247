"""The sweeper's caching config loader gives every job the config Hydra's own loader composes."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from attnlab.app.config_paths import config_dir
from attnlab.app.config_store import register_configs
from hydra_plugins.attnlab_sweeper._loader import SweepConfigLoader
from hydra_plugins.attnlab_sweeper.attnlab_sweeper import cartesian

# (Hydra's own overrides, the sweep's lines, how many compositions the loader asks Hydra's for):
# every job of each sweep is compared with the config Hydra's loader composes for it
SWEEPS = [
    ([], ["variant=reference,linear", "seed=1,2"], 2),
    # a value before the group it depends on; a nested key; a float; a string
    ([], ["seed=3", "inputs=random", "inputs.n_tokens=4", "variant=reference,linear", "dropout=0.1,0.25",
          "attn_implementation=sdpa"], 2),
    # +key and ++key with lists, dicts, strings and floats; Hydra's folder name with other separators, exclusions
    (["hydra.job.config.override_dirname.exclude_keys=[seed,+extra]", "hydra.job.config.override_dirname.kv_sep=_",
      "hydra.job.config.override_dirname.item_sep=__"],
     ["variant=linear,causal", "++variant.params.foo=1.5", "++variant.params.bar=abc", "+variant.params={baz:2}",
      "+extra=[1,2],'a b'", "++expect.context_shape=[6,2]", "seed=5"], 2),
    # a group added with +, setting Hydra's own keys; env_copy; a cached resolver in the master config
    (["hydra.job.env_copy=[HOME]", "+hydra.job.env_set.STAMP=${now:%H%M%S%f}"],
     ["+experiment=dk_scaling", "d_out=2,8", "seed=1"], 1),
    ([], ["+sink@sink.extra=table", "seed=2,3"], 1),  # a group choice with a package: composed, kept
    ([], ["variant.name=causal,reference", "variant={name:linear}"], 1),  # a dict for a group: a value, in order
    # lines Hydra's loader composes in full, job by job: a deletion, Hydra's own config
    ([], ["variant=linear", "~dropout"], 1),
    ([], ["variant=linear", "hydra.job.name=x", "seed=1,2"], 2),
]


@pytest.fixture(scope="module")
def loader() -> Iterator:
    """Hydra's own config loader over attnlab's config, as `python -m attnlab` builds it."""
    register_configs()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def master(loader, hydra_lines: list[str], lines: list[str]) -> DictConfig:
    config = loader.load_configuration(config_name="config", overrides=hydra_lines + lines, run_mode=RunMode.MULTIRUN)
    for key in config.hydra.job.env_set:
        _ = config.hydra.job.env_set[key]  # resolved: `now` fills the resolver cache a job's config copies
    return config


def jobs(lines: list[str]) -> list[list[str]]:
    return cartesian(OverridesParser.create().parse_overrides(lines))


def hydras(loader, sweep: DictConfig, job: list[str]) -> DictConfig:
    """The job's config as Hydra's own loader composes it (not counted by `compositions`)."""
    return type(loader).load_sweep_config(loader, master_config=sweep, sweep_overrides=list(job))


@pytest.fixture
def compositions(loader, monkeypatch) -> list[list[str]]:
    """The compositions asked of Hydra's loader through the instance: the caching loader's."""
    asked: list[list[str]] = []
    monkeypatch.setattr(loader, "load_sweep_config", lambda master_config, sweep_overrides:
                        asked.append(list(sweep_overrides)) or hydras(loader, master_config, sweep_overrides))
    return asked


def assert_same(ours: DictConfig, theirs: DictConfig) -> None:
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(theirs)
    assert OmegaConf.get_cache(ours) == OmegaConf.get_cache(theirs)
    for node in ("", "hydra", "inputs", "variant", "hydra.job"):
        a, b = OmegaConf.select(ours, node), OmegaConf.select(theirs, node)
        assert (OmegaConf.is_struct(a), OmegaConf.is_readonly(a), OmegaConf.get_type(a)) == \
               (OmegaConf.is_struct(b), OmegaConf.is_readonly(b), OmegaConf.get_type(b)), node


@pytest.mark.parametrize("hydra_lines,lines,composed", SWEEPS, ids=lambda value: str(value))
@pytest.mark.slow
def test_every_job_is_the_config_hydra_composes(loader, compositions, hydra_lines, lines, composed) -> None:
    sweep = master(loader, hydra_lines, lines)
    ours = SweepConfigLoader(loader)
    for job in jobs(lines):
        assert_same(ours.load_sweep_config(sweep, list(job)), hydras(loader, sweep, job))
    assert len(compositions) == composed
    assert OmegaConf.get_cache(sweep) or not hydra_lines  # the resolver cache compared is not an empty one


@pytest.mark.slow
def test_a_composition_per_combination_of_config_group_choices(loader, compositions) -> None:
    lines = ["variant=reference,linear,unscaled,wrong_softmax_axis", "seed=1,2,3,4,5"]
    sweep = master(loader, [], lines)
    ours = SweepConfigLoader(loader)
    configs = [ours.load_sweep_config(sweep, job) for job in jobs(lines)]
    assert compositions == [["variant=reference"], ["variant=linear"], ["variant=unscaled"],
                            ["variant=wrong_softmax_axis"]]
    assert [(c.variant.name, c.seed) for c in configs[:6]] == [("reference", s) for s in range(1, 6)] + [("linear", 1)]


def test_a_job_changing_its_config_changes_no_other_job(loader) -> None:
    sweep = master(loader, [], ["variant=linear", "seed=1,2"])
    ours = SweepConfigLoader(loader)
    first = ours.load_sweep_config(sweep, ["variant=linear", "seed=1"])
    first.seed = 99
    with open_dict(first):
        first.variant.params.foo = 1
    first.hydra.overrides.task.append("changed=1")
    second = ["variant=linear", "seed=2"]
    assert_same(ours.load_sweep_config(sweep, second), hydras(loader, sweep, second))


@pytest.mark.parametrize("job", [["variant=linear", "sed=1"], ["variant=linear", "+seed=3"], ["seed@foo=1"],
                                 ["~no_such_key"], ["variant=no_such_variant", "seed=1"], ["seed=[1"],
                                 ["variant=linear", "seed=1", "variant.params=2"],
                                 ["inputs={n_tokens:3}", "seed=1"]])
@pytest.mark.slow
def test_a_bad_line_fails_with_hydras_own_error(loader, job) -> None:
    sweep = master(loader, [], ["variant=linear"])
    ours = SweepConfigLoader(loader)
    ours.load_sweep_config(sweep, ["variant=linear", "seed=2"])  # the cache holds the job's group choice
    with pytest.raises(Exception) as theirs:
        hydras(loader, sweep, job)
    with pytest.raises(type(theirs.value)) as caught:
        ours.load_sweep_config(sweep, job)
    assert str(caught.value) == str(theirs.value)
    assert type(caught.value.__cause__) is type(theirs.value.__cause__)  # noqa: E721
    assert str(caught.value.__cause__) == str(theirs.value.__cause__)


def test_the_loader_pickles_without_its_cache(loader) -> None:
    """joblib, submitit and Ray pickle the launcher's HydraContext for their workers."""
    sweep = master(loader, [], ["variant=linear,causal", "seed=1,2"])
    empty = SweepConfigLoader(loader)
    ours = SweepConfigLoader(loader)
    for job in jobs(["variant=linear,causal", "seed=1,2"]):
        ours.load_sweep_config(sweep, job)
    assert len(pickle.dumps(ours)) == len(pickle.dumps(empty))
    context = pickle.loads(pickle.dumps(HydraContext(config_loader=ours, callbacks=None)))
    worker = context.config_loader
    assert isinstance(worker, SweepConfigLoader) and type(worker.loader) is type(loader)
    job = ["variant=causal", "seed=2"]
    assert_same(worker.load_sweep_config(sweep, job), hydras(loader, sweep, job))


def test_the_environment_the_folder_and_the_resolver_cache_are_read_for_each_job(loader, tmp_path, monkeypatch) -> None:
    """Hydra's composition copies `hydra.job.env_copy`, the working folder and the master config's
    resolver cache into every job: as they are when the job is composed."""
    monkeypatch.setenv("ATTNLAB_TEST_COPIED", "first")
    sweep = loader.load_configuration(config_name="config", run_mode=RunMode.MULTIRUN, overrides=[
        "hydra.job.env_copy=[ATTNLAB_TEST_COPIED]", "+hydra.job.env_set.LATER=${now:%f}", "variant=linear",
        "seed=1,2,3"])
    ours = SweepConfigLoader(loader)
    ours.load_sweep_config(sweep, ["variant=linear", "seed=1"])
    assert ("%f",) not in OmegaConf.get_cache(sweep)["now"]  # the loader resolves nothing (its lines neither)
    monkeypatch.setenv("ATTNLAB_TEST_COPIED", "second")
    _ = sweep.hydra.job.env_set.LATER  # fills the master's resolver cache after the group choice was composed
    second = ours.load_sweep_config(sweep, ["variant=linear", "seed=2"])
    assert second.hydra.job.env_set.ATTNLAB_TEST_COPIED == "second" and OmegaConf.get_cache(second)
    assert_same(second, hydras(loader, sweep, ["variant=linear", "seed=2"]))
    monkeypatch.chdir(tmp_path)
    third = ours.load_sweep_config(sweep, ["variant=linear", "seed=3"])
    assert third.hydra.runtime.cwd == str(tmp_path)
    assert_same(third, hydras(loader, sweep, ["variant=linear", "seed=3"]))
