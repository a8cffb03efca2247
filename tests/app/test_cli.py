"""The real Hydra app in a subprocess: outputs, layout, help, exit codes, one-line errors."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.capture.stages import STAGES

pytestmark = pytest.mark.slow


def test_single_run_prints_the_summary_and_writes_record_and_table(app):
    run = app("variant=unscaled")
    assert run.returncode == 0, run.stderr
    assert "attnlab · variant=unscaled seed=123 inputs=book n_tokens=6 d_in=3 d_out=2 weights=shared" in run.stdout
    assert "queries (6, 2)" in run.stdout and "weights (6, 6)" in run.stdout
    assert re.search(r"journey\s+0\.\d{4}", run.stdout)
    assert "first divergent stage: scaled_scores" in run.stdout
    record = run.record
    assert record["variant"] == "unscaled" and record["seed"] == 123 and record["status"] == "ok"
    assert record["error"] is None
    seen = set(STAGES) - {"weights_applied"}  # eval mode: the weights are what is applied to the values
    assert set(record["stages"]) == seen and set(record["reference_stages"]) == seen
    weights = record["stages"]["weights"]
    assert record["format_version"] == 3 and record["reference"] == "reference"
    assert weights["shape"] == [6, 6] and weights["canonical_axes"] == ["batch", "heads", "query", "key"]
    assert weights["canonical_shape"] == [1, 1, 6, 6]
    assert len(weights["values"]) == 6 and len(weights["values"][0]) == 6  # the module's own rank
    assert record["diagnostics"]["divergence_queries"] == 0.0
    assert record["diagnostics"]["divergence_context"] > 0.0
    assert record["diagnostics"]["divergence_output"] == record["diagnostics"]["divergence_context"]
    assert record["output_is_context"] is True
    assert record["config"]["variant"]["name"] == "unscaled" and record["config"]["weights"] == "shared"
    with open(run.out_dir / "comparison.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["module"] for r in rows] == ["reference", "variant"]
    assert set(record["diagnostics"]) <= set(rows[0])


def test_the_reference_run_matches_the_book_in_the_terminal(app):
    run = app()
    assert run.returncode == 0, run.stderr
    assert "  Your     0.2996  0.8053" in run.stdout and "  step     0.2990  0.8040" in run.stdout
    assert "no findings: the variant matches the reference at every stage checked" in run.stdout


def test_default_output_folders_are_relative_to_the_working_folder(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnlab", "variant=wrong_softmax_axis", "seed=7", "log.tensorboard=false"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (job,) = (tmp_path / "runs").glob("*/*")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", job.parent.name)
    assert re.fullmatch(r"\d{2}-\d{2}-\d{2}-wrong_softmax_axis", job.name)
    assert json.loads((job / "record.json").read_text())["seed"] == 7


def test_a_multirun_goes_to_numbered_job_folders(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnlab", "-m", "variant=reference,unscaled", "seed=1",
                           "log.tensorboard=false"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p.name for p in (tmp_path / "runs" / "multirun").glob("*/*/*") if p.is_dir())
    assert jobs == ["0-seed=1,variant=reference", "1-seed=1,variant=unscaled"]


def test_help_lists_every_variant_with_its_description(app):
    run = app("--help")
    assert run.returncode == 0
    from attnlab.modules.registry import discover

    for name, spec in discover().specs.items():
        assert re.search(rf"^\s+{name}\s+{re.escape(spec.description)}$", run.stdout, re.M), name
    from attnlab.schema import CHOICE_KEYS, KEYS

    keys = run.stdout.split("== Keys ==")[1].split("== Config ==")[0]
    assert {line.split()[0] for line in keys.strip().splitlines()} == {k.name for k in (*KEYS, *CHOICE_KEYS)}


@pytest.mark.skipif(shutil.which("attnlab", path=str(Path(sys.executable).parent)) is None, reason="console script not installed")
def test_console_script_runs_the_same_app(tmp_path):
    script = Path(sys.executable).parent / "attnlab"
    proc = subprocess.run([str(script), "variant=linear", f"hydra.run.dir={tmp_path}/o", "log.tensorboard=false"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "record.json").read_text())["variant"] == "linear"


BAD_INPUTS = [
    (["d_out=0"], "d_out=0: must be a positive integer"),
    (["d_out=-2"], "d_out=-2: must be a positive integer"),
    (["seed=abc"], "seed=abc: must be an integer in [0, 18446744073709551615] (torch's seed range)"),
    (["inputs=random", "inputs.n_tokens=0"], "inputs.n_tokens=0: must be a positive integer"),
    (["weights=both"], "weights: Invalid value 'both', expected one of [shared, native]"),
    (["attn_implementation=flash"], "attn_implementation=flash: allowed are eager, sdpa, flex_attention"),
    (["variant=unscald"], "unknown variant 'unscald'; did you mean 'unscaled'? available:"),
    (["inputs=nope"], "Could not find 'inputs/nope'; Available options in 'inputs': book, file, ids, random, text"),
    (["inputs=file"], "inputs.path is missing: inputs=file needs inputs.path=FILE"),
    (["expect.no_such_prediction=1"], "expect.no_such_prediction: unknown prediction; allowed: context_shape,"),
    (["expect.context_shape=6"], "expect.context_shape: expected a list of ints like [6, 2], got 6"),
    (["inputs=text", "inputs.text=Hello, tea?"], "2. To use it as string, quote the value: key=\\'value1,value2\\'"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_writes_no_record(app, args, message):
    run = app(*args)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error: "), run.stderr
    assert message in lines[0]
    assert "Traceback" not in run.stderr + run.stdout
    assert not (run.out_dir / "record.json").exists()


def test_an_inputs_file_with_ragged_rows_is_refused(app, tmp_path):
    bad = tmp_path / "ragged.csv"
    bad.write_text("Your,0.43,0.15,0.89\njourney,0.55,0.87\n")
    run = app("inputs=file", f"inputs.path={bad}")
    assert run.returncode == 2
    assert run.stderr.strip() == f"attnlab: error: inputs.path={bad}: rows differ in length (2, 3); every token row needs the same d_in"


def test_a_bad_run_into_an_existing_folder_keeps_what_was_written(app):
    good = app("variant=unscaled", "log.tensorboard=false")
    assert good.returncode == 0
    before = {p: p.read_bytes() for p in good.out_dir.iterdir() if p.is_file()}
    bad = app("variant=unscaled", "d_out=0")
    assert bad.returncode == 2
    assert {p: p.read_bytes() for p in good.out_dir.iterdir() if p.is_file()} == before


def test_a_failed_plugin_exits_non_zero_with_its_error_in_the_record(app, plugin_folder):
    folder = plugin_folder("nan_free_crash", """
        import torch.nn as nn
        class Crash(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
            def forward(self, x):
                raise ValueError("shapes do not line up")
    """)
    # no parameters to share: weights=native lets the run reach the forward
    run = app("variant=nan_free_crash", "weights=native", env={"ATTNLAB_PLUGIN_PATH": str(folder)})
    assert run.returncode == 1, run.stderr
    assert "FAILED: variant 'nan_free_crash' raised ValueError: shapes do not line up" in run.stdout
    assert run.record["status"] == "failed"
    assert "Traceback" not in run.stderr


def test_predictions_are_written_as_the_issue_spells_them_and_reported(app):
    run = app("variant=wrong_softmax_axis", "expect.context_shape=[6,2]", "expect.row_sums=1",
              "expect.first_divergent_stage=weights", "log.tensorboard=false")
    assert run.returncode == 0, run.stderr
    assert "predict context_shape = [6, 2]: pass (observed [6, 2])" in run.stdout
    assert "predict row_sums = 1: FAIL" in run.stdout
    assert "predict first_divergent_stage = weights: pass" in run.stdout
    assert {p["name"]: p["passed"] for p in run.record["predictions"]} == {
        "context_shape": True, "row_sums": False, "first_divergent_stage": True}


EXIT_FAST = """
import atexit, sys, threading, time
from pathlib import Path
from attnlab.app.cli import exit_fast
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
if sys.argv[2] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), (out / "thread").write_text("done"))).start()
print("flushed", end="")
exit_fast(3)
"""


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["alone", "thread"])
def test_exit_fast_keeps_the_exit_code_output_atexit_handlers_and_other_threads(tmp_path, threads):
    done = subprocess.run([sys.executable, "-c", EXIT_FAST, str(tmp_path), threads], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3 and done.stdout == "flushed", done.stderr
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").exists() == (threads == "thread")


@pytest.mark.slow
def test_a_reader_that_leaves_early_fails_nothing(tmp_path):
    """`attnlab ... | head -1`: the run still succeeds and writes every output."""
    process = subprocess.Popen([sys.executable, "-m", "attnlab", "variant=unscaled", f"hydra.run.dir={tmp_path / 'out'}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate(timeout=300)
    assert first.startswith("attnlab · variant=unscaled")
    assert process.returncode == 0 and "Error" not in err and "Traceback" not in err, err
    assert (tmp_path / "out" / "record.json").exists() and list((tmp_path / "out").glob("events.out.tfevents.*"))


LINGERS = """
import threading, time
import torch
import torch.nn as nn

class Lingers(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        threading.Thread(target=time.sleep, args=(3600,), name="sleeper").start()
        return x @ self.W_query
"""


@pytest.mark.slow
def test_a_thread_left_running_by_a_forward_never_holds_the_command(app, plugin_folder, tmp_path) -> None:
    folder = plugin_folder("lingers", LINGERS)
    done = app("variant=lingers", "log.tensorboard=false",
               env={"ATTNLAB_PLUGIN_PATH": str(folder), "ATTNLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0 and done.record["status"] == "ok", done.stderr  # returned at all: not held
    assert "still running after the records were written; not waited for" in done.stderr.splitlines()[-1]


FORKS = """
import os
import torch
import torch.nn as nn

class Forks(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        if not os.environ.get("FORKED"):
            os.environ["FORKED"] = "1"
            os.fork()  # parent and child both return into attnlab
        return x @ self.W_query
"""


@pytest.mark.slow
def test_a_child_forked_in_a_forward_never_reaches_reporting(app, plugin_folder, tmp_path) -> None:
    folder = plugin_folder("forks", FORKS)
    done = app("variant=forks", "log.tensorboard=false",
               env={"ATTNLAB_PLUGIN_PATH": str(folder), "ATTNLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0 and done.record["status"] == "ok", done.stderr
    assert done.stdout.count("attnlab · variant=forks") == 1, done.stdout  # the summary once: the parent's


@pytest.mark.parametrize("arg,message", [
    ("n_seeds=0", "n_seeds=0: must be a positive integer (1, 2, 3, ...)"),
    ("dropout=1.5", "dropout=1.5: must be a number in [0, 1)"),
    ("n_sedes=2", "n_sedes: unknown key; did you mean 'n_seeds'?"),
])
def test_a_bad_value_or_a_misspelt_key_is_refused_before_torch_is_imported(app, arg, message):
    """Issue 52's fast start: the config checks run first, torch later. `-X importtime` lists every
    module the command imported (`| torch` for torch itself); not a timing test."""
    run = app(arg, env={"PYTHONPROFILEIMPORTTIME": "1"})
    said = [line for line in run.stderr.splitlines() if not line.startswith("import time:")]
    imported = {line.rpartition("|")[2].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert run.returncode == 2 and said == [f"attnlab: error: {message}"], run.stderr[-2000:]
    assert "attnlab.app.cli" in imported and "torch" not in imported and "transformers" not in imported
    assert not run.out_dir.exists()
