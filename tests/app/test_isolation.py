"""What a module does to its process is its own job's failed record, through the real CLI:
sys.exit, os._exit, a KeyboardInterrupt it raises, a segfault, a hang past
timeout_s. One plugin per behaviour, written into a temp folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FAULTS = {  # variant name: the forward's body, and the cause its failed record names
    "exits": ("sys.exit(0)", "the job called sys.exit(0)"),
    "os_exits": ("os._exit(0)", "variant 'os_exits' raised ExitCalled: os._exit(0) called in forward"),
    "interrupts": ("raise KeyboardInterrupt", "the job raised KeyboardInterrupt (not a Ctrl-C)"),
    "segfaults": ("ctypes.string_at(0)", "the job's process died of SIGSEGV in string_at ("),
    "hangs": ("time.sleep(3600)", "the job ran past timeout_s=3 and was stopped"),
}


def write_plugins(folder: Path, names: list[str]) -> Path:
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(textwrap.dedent(f"""
            import ctypes, os, sys, time
            import torch.nn as nn

            class Fault(nn.Module):
                def __init__(self, d_in, d_out):
                    super().__init__()

                def forward(self, x):
                    {FAULTS[name][0]}
        """))
    return folder


def attnlab(cwd: Path, plugins: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, "ATTNLAB_PLUGIN_PATH": str(plugins)}
    return subprocess.run([sys.executable, "-m", "attnlab", *args, "weights=native", "log.tensorboard=false"], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def records(folder: Path) -> dict[str, dict]:
    found = [json.loads(p.read_text()) for p in folder.rglob("record.json")]
    return {r["variant"]: r for r in found}


def test_every_fault_of_a_module_is_its_own_failed_record_and_the_sweep_goes_on(tmp_path) -> None:
    plugins = write_plugins(tmp_path / "plugins", list(FAULTS))
    done = attnlab(tmp_path, plugins, "-m", f"variant={','.join(FAULTS)},unscaled", "timeout_s=3",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", "log.terminal=false")
    assert done.returncode == 1, done.stderr
    found = records(tmp_path / "sweep")
    assert found["unscaled"]["status"] == "ok"
    for name, (_, cause) in FAULTS.items():
        assert found[name]["status"] == "failed" and found[name]["error"].startswith(cause), (name, found[name]["error"])
    assert "sweep: 6 job(s)" in done.stdout and "Traceback" not in done.stderr
    # where native code crashed, through which module: the plugin's forward, its line the faulting call
    line = next(i for i, text in enumerate((plugins / "segfaults.py").read_text().splitlines(), 1) if "string_at" in text)
    assert found["segfaults"]["error"].endswith(f"called from forward (tmp_path_plugins/segfaults.py:{line})"
                                                .replace("tmp_path_plugins", f"{tmp_path.name}/plugins"))
    assert "Fatal Python error" not in done.stderr  # the trace went to the record, not the terminal


@pytest.mark.parametrize("name", ["exits", "interrupts", "hangs"])
def test_a_single_run_whose_module_exits_interrupts_or_hangs_is_a_failed_record_exit_1(tmp_path, name) -> None:
    plugins = write_plugins(tmp_path / "plugins", [name])
    done = attnlab(tmp_path, plugins, f"variant={name}", f"hydra.run.dir={tmp_path / 'run'}", "timeout_s=3")
    assert done.returncode == 1, done.stderr
    assert records(tmp_path / "run")[name]["error"].startswith(FAULTS[name][1])
    # the cause where the user looks, whichever process noticed it; the record as typed from here
    assert f"FAILED: {FAULTS[name][1]}" in done.stdout
    assert done.stderr.endswith("attnlab: 1 failed record(s): run/record.json\n"), done.stderr


def test_a_job_that_fails_before_its_modules_run_has_its_row(tmp_path) -> None:
    """Inputs whose length only reading them tells (a text) against context_length: job 0's row says
    why, job 1 runs."""
    done = attnlab(tmp_path, tmp_path, "-m", "variant=causal_attention", "inputs=text",
                   "inputs.text=one two three four five", "context_length=4,8", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   "log.terminal=false")
    assert done.returncode == 1, done.stderr
    found = sorted((json.loads(p.read_text()) for p in (tmp_path / "sweep").rglob("record.json")),
                   key=lambda r: r["config"]["context_length"])
    assert [r["status"] for r in found] == ["failed", "ok"]
    assert found[0]["error"] == "context_length=4: must be at least the inputs' 5 tokens"


def test_a_ctrl_c_while_a_jobs_process_starts_is_the_users_interrupt(monkeypatch) -> None:
    """A Ctrl-C that lands inside multiprocessing's start of a job's process (the sweep creates the
    job's folder just before, which is when a user looking at it presses Ctrl-C) stops the sweep:
    it left a process that could be neither joined nor killed, and an AssertionError that the sweep
    took for the job's failure and went on."""
    from multiprocessing import forkserver

    from attnlab.app.guard import UserInterrupt
    from attnlab.app.isolation import isolated
    from attnlab.app.job_worker import stop_worker

    stop_worker()  # a worker left by an earlier test would take the job without a start
    connect = forkserver.connect_to_new_process

    def connect_interrupted(fds: list[int]) -> tuple[int, int]:
        os.kill(os.getpid(), signal.SIGINT)
        return connect(fds)

    monkeypatch.setattr(forkserver, "connect_to_new_process", connect_interrupted)
    with pytest.raises(UserInterrupt):
        isolated(list, str, None)


def test_a_ctrl_c_just_before_a_jobs_process_starts_is_the_users_interrupt(monkeypatch) -> None:
    """A Ctrl-C while the parent flushes its output, before the start: joining the process that
    never started raised an AssertionError, which the sweep took for the job's failure and went on."""
    from attnlab.app.guard import UserInterrupt
    from attnlab.app.isolation import isolated

    def flush_interrupted() -> None:
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(sys.stdout, "flush", flush_interrupted)
    with pytest.raises(UserInterrupt):
        isolated(list, str, None)


def test_a_job_that_died_before_its_inputs_makes_no_size_look_swept(tmp_path, use_plugins, capsys) -> None:
    """Its record never reached n_tokens, d_in or d_out: they are missing in its row, not 0, so the
    sweep's table sweeps only the variant and no curve (TensorBoard's sweep runs) is drawn."""
    from attnlab.app.cli import main as cli_main
    from attnlab.reporting.aggregate import Report, find_record_files, load_records, swept_columns
    from attnlab.reporting.metrics import hparams
    from attnlab.reporting.sweep_plots import sweep_curves

    use_plugins(write_plugins(tmp_path / "plugins", ["segfaults"]))
    sweep = tmp_path / "sweep"
    code = cli_main(["-m", "variant=unscaled,segfaults,scaled_by_dk", "weights=native", "log.terminal=false",
                     f"hydra.sweep.dir={sweep}"])
    assert code == 1, capsys.readouterr().err
    records, problems = load_records(find_record_files([sweep]))
    report = Report(records)
    (failed,) = [r for r in records if not r.ok]
    assert not problems and failed.variant.name == "segfaults"
    assert not {"n_tokens", "d_in"} & set(hparams(failed)) and hparams(failed)["d_out"] == 2  # the config's d_out
    row = report.jobs.set_index("variant").loc["segfaults"]
    assert row[["d_in", "d_out", "n_tokens"]].isna().all()
    assert list(report.jobs["n_tokens"].dropna()) == [6, 6]
    assert "d_in" not in swept_columns(report.jobs) and "n_tokens" not in swept_columns(report.jobs)
    assert sweep_curves(report)[0] == []
    assert not (sweep / "sweep").exists()  # TensorBoard's sweep runs: one per curve line
    csv_row = next(line for line in (sweep / "comparison.csv").read_text().splitlines() if line.startswith("segfaults,"))
    assert csv_row.startswith("segfaults,123,,,,")  # variant, seed, then the sizes: empty
