"""The in-process guard and the sweep folder's bookkeeping, without a process or a sweep."""

from __future__ import annotations

import json
import signal
import sys
import types

import pytest

from attnlab.app.guard import UserInterrupt, guarded
from attnlab.app.isolation import death_cause
from attnlab.app.job_worker import main_package
from attnlab.record.completion import mark_done
from hydra_plugins.attnlab_sweeper.folder import job_outcomes, runs_of


def raises(exc: BaseException):
    def work() -> list:
        raise exc
    return work


def test_a_module_exiting_or_interrupting_is_a_failure_the_users_ctrl_c_is_not() -> None:
    causes = []
    assert guarded(raises(SystemExit(3)), lambda cause: causes.append(cause) or "path") == ["path"]
    assert guarded(raises(KeyboardInterrupt()), lambda cause: causes.append(cause) or "path") == ["path"]
    assert causes[0].startswith("the job called sys.exit(3)") and causes[1].startswith("the job raised KeyboardInterrupt")
    with pytest.raises(UserInterrupt):
        guarded(raises(UserInterrupt()), lambda cause: "path")


def test_a_dead_process_is_named_by_its_signal_or_exit_code() -> None:
    assert death_cause(-signal.SIGSEGV).startswith("the job's process died of SIGSEGV")
    assert death_cause(0).startswith("the job's process exited with code 0 before reporting")


@pytest.mark.parametrize(("main", "preloaded"), [
    ("joblib.externals.loky.backend.popen_loky_posix", ["joblib.externals.loky.backend"]),  # a joblib worker
    ("attnlab.__main__", []),  # python -m attnlab: a package's __main__, never run again in a job's process
    ("script", []),  # python -m script: no package
    (None, []),  # python script.py, the `attnlab` command
])
def test_the_forkserver_imports_the_package_of_a_main_module_each_job_runs_again(monkeypatch, main, preloaded) -> None:
    spec = types.SimpleNamespace(name=main) if main else None
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=spec))
    assert main_package() == preloaded


def test_jobs_to_launch_keep_their_numbers_in_consecutive_runs() -> None:
    assert runs_of([0, 1, 2, 5, 7, 8]) == [(0, 3), (5, 6), (7, 9)]
    assert runs_of([]) == []


def test_a_job_is_done_when_all_its_seeds_have_ok_records(tmp_path) -> None:
    def job(name: str, overrides: list[str], statuses: list[str], n_seeds: int = 1, **changes) -> None:
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
        for i, status in enumerate(statuses):
            folder = tmp_path / name / f"seed-{i}"
            folder.mkdir()
            record = {"variant": name, "seed": i, "status": status, "config": {"n_seeds": n_seeds}, **changes}
            (folder / "record.json").write_text(json.dumps({k: v for k, v in record.items() if v is not None}))

    job("0-a", ["variant=a"], ["ok"])
    job("1-b", ["variant=b"], ["ok", "failed"], n_seeds=2)
    job("2-c", ["variant=c"], ["ok"], n_seeds=2)  # cut short after one of its two seeds
    job("3-d", ["variant=d"], [])
    job("4-e", ["variant=e"], ["ok"], seed=float("nan"))  # json writes NaN: read back, an "ok" that is no record
    job("5-f", ["variant=f"], ["ok"], variant=None)  # a field missing
    mark_done(tmp_path / "0-a", ["variant=a"])  # written after its outputs: without it, a job is not done
    job("6-g", ["variant=g"], ["ok"])  # its records ok, its outputs never all written
    assert job_outcomes(tmp_path) == {("variant=a",): True, ("variant=b",): False, ("variant=c",): False,
                                      ("variant=e",): False, ("variant=f",): False, ("variant=g",): False}


FINISHED: list = []


def record_finish(config, complete: bool, missing=()) -> None:
    FINISHED.append((complete, list(missing)))


class DyingLauncher:
    """A launcher whose workers die: every launch raises, after job 0 of the first one wrote its record."""

    def __init__(self, folder) -> None:
        self.folder, self.launched = folder, []

    def launch(self, jobs, initial_job_idx: int):
        self.launched.append((initial_job_idx, [list(job) for job in jobs]))
        if len(self.launched) == 1:
            (self.folder / "0" / ".hydra").mkdir(parents=True)
            (self.folder / "0" / ".hydra" / "overrides.yaml").write_text("- a=1\n")
            (self.folder / "0" / "record.json").write_text(json.dumps({"status": "ok", "config": {}}))
        raise RuntimeError("A worker process was terminated. More text")


def test_a_launcher_that_fails_relaunches_the_jobs_without_a_record_then_lists_the_missing(tmp_path, capsys,
                                                                                         monkeypatch) -> None:
    from omegaconf import OmegaConf

    from attnlab.app import sweep_hooks
    from hydra_plugins.attnlab_sweeper.attnlab_sweeper import AttnlabSweeper

    monkeypatch.setattr(sweep_hooks, "finish", record_finish)
    sweeper = AttnlabSweeper(finish=True)
    sweeper.config, sweeper.launcher = OmegaConf.create({}), DyingLauncher(tmp_path)
    FINISHED.clear()
    sweeper.run([["a=1"], ["a=2"], ["a=3"]], [0, 1, 2], tmp_path)
    assert sweeper.launcher.launched == [(0, [["a=1"], ["a=2"], ["a=3"]]), (1, [["a=2"], ["a=3"]])]
    assert FINISHED == [(True, ["#1 a=2", "#2 a=3"])]
    assert capsys.readouterr().err == ("attnlab: the launcher failed (RuntimeError: A worker process was terminated); "
                                       "launching the 2 job(s) without a record again\n")


def test_the_end_of_a_sweep_lists_the_jobs_without_a_record_and_fails(tmp_path, capsys) -> None:
    from omegaconf import OmegaConf

    from attnlab.app.sweep import finish
    from attnlab.errors import FailedRecords

    with pytest.raises(FailedRecords) as caught:
        finish(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}), complete=True, missing=["#1 a=2"])
    assert str(caught.value) == "1 job(s) without a record (run the same command again to run them)"
    assert capsys.readouterr().err == "attnlab: no record: job #1 a=2\n"


def test_a_crash_names_where_it_died_and_the_forward_it_came_through():
    from attnlab.app.crash_site import crash_site

    log = ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n'
           '  File "/venv/lib/python3.11/site-packages/torch/nn/attention/flex_attention.py", line 1400 in flex_attention\n'
           '  File "/home/me/plugins/flex.py", line 40 in forward\n'
           '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1775 in _call_impl\n')
    assert crash_site(log) == ("in flex_attention (nn/attention/flex_attention.py:1400), "
                               "called from forward (me/plugins/flex.py:40)")
    assert crash_site('  File "/a/b/mine.py", line 3 in forward\n') == "in forward (a/b/mine.py:3)"
    assert crash_site("") == ""  # killed, not crashed: no frame
    assert death_cause(-signal.SIGKILL, "") == "the job's process died of SIGKILL (a crash in native code, or killed)"
