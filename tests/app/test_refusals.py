"""Requests refused before any work, through the real CLI: one line `attnlab: error: KEY=VALUE: what
is allowed`, exit code 2, and no folder left anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def attnlab(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def tree(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


REFUSED = [
    (["variant=reference", "qkv_bias=2"], "qkv_bias=2: must be true or false"),
    (["variant=reference", "dropout=2"], "dropout=2: must be a number in [0, 1)"),
    (["variant=gqa", "num_kv_heads=0"], "num_kv_heads=0: must be a positive integer (1, 2, 3, ...) or null"),
    (["profile=true", "profile_budget_s=inf"], "profile_budget_s=inf: must be a number of seconds in (0, 3600]"),
    (["batch=0"], "batch=0: must be a positive integer (1, 2, 3, ...)"),
    (["seed=18446744073709551616"], "seed=18446744073709551616: must be an integer in [0, 18446744073709551615] (torch's seed range)"),
    (["variant=causal_attention", "context_length=2"], "context_length=2: must be at least the inputs' 6 tokens"),
    (["sink=5"], "sink=5: sinks are switched by log.NAME=true|false and set by sink.NAME.KEY=VALUE, not chosen by sink="),
    (["inputs=5"], "inputs=5: allowed are book, file, ids, random, text"),
    (["timeout_s=0"], "timeout_s=0: must be a number of seconds in (0, inf] or null"),
    (["variant=multi_head_attention", "d_out=3"],
     "d_out=3: must be a multiple of num_heads=2 (variant 'multi_head_attention' splits d_out into num_heads heads)"),
    (["+model.pth=x"], "model.pth: unknown key without a model (model=hf:TYPE, model.path=DIR, model.hub=REPO_ID "
                       "or model=NAME); did you mean 'model.path'?"),
    (["d_in=4"], "d_in: unknown key; did you mean 'inputs.d_in=4' (with inputs=ids|random|text)?"),
    (["model=hf:gpt2", "model.n_layer=2", "model.n_head=4", "model.n_embd=64", "inputs=text", "intervene=ablate_head",
      "intervene.head=7"], "intervene.head=7: the model has 4 heads (0 to 3)"),
    (["inputs=text", "inputs.text=héllo wörld"],
     "inputs.text=héllo wörld: Hydra's grammar cannot read this value unquoted; quote it: 'inputs.text=\"héllo wörld\"'"),
]


@pytest.mark.parametrize("args,message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_bad_value_is_one_line_exit_2_and_leaves_no_folder(tmp_path, args, message) -> None:
    done = attnlab(tmp_path, *args)
    assert (done.returncode, done.stderr) == (2, f"attnlab: error: {message}\n")
    assert tree(tmp_path) == set()  # not even runs/<date>/


def test_a_variant_name_that_climbs_out_of_runs_creates_nothing(tmp_path) -> None:
    here = tmp_path / "a" / "b" / "c"
    here.mkdir(parents=True)
    done = attnlab(here, "variant.name=../../../../X")
    assert done.returncode == 2 and done.stderr.startswith("attnlab: error: unknown variant '../../../../X'")
    assert tree(tmp_path) == {Path("a"), Path("a/b"), Path("a/b/c")}


def test_every_bad_value_of_a_sweep_is_printed_before_any_job_and_nothing_is_made(tmp_path) -> None:
    done = attnlab(tmp_path, "-m", "variant=unscaled", "batch=0,2", "seed=1,99999999999999999999")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "attnlab: error: batch=0: must be a positive integer (1, 2, 3, ...)",
        "attnlab: error: seed=99999999999999999999: must be an integer in [0, 18446744073709551615] (torch's seed range)",
    ]
    assert tree(tmp_path) == set()


def test_values_that_each_pass_but_not_together_refuse_the_sweep(tmp_path) -> None:
    done = attnlab(tmp_path, "-m", "variant=gqa", "d_out=8", "num_heads=4,2", "num_kv_heads=4,2")
    assert (done.returncode, done.stderr) == (2, "attnlab: error: num_kv_heads=4: must divide num_heads=2\n")
    assert tree(tmp_path) == set()


def test_d_out_is_split_into_heads_only_by_variants_that_take_num_heads() -> None:
    from attnlab.app.api import compose_config
    from attnlab.app.run_job import check_constructor
    from attnlab.errors import UserError

    with pytest.raises(UserError, match=r"^d_out=6: must be a multiple of num_heads=4 \(variant 'multi_head_attention'"):
        check_constructor(compose_config("multi_head_attention", 1, ["d_out=6", "num_heads=4"]))
    check_constructor(compose_config("multi_head_attention", 1, ["d_out=8", "num_heads=4"]))
    check_constructor(compose_config("unscaled", 1, ["d_out=3", "num_heads=2"]))  # no heads: nothing to split


def test_a_sweep_whose_values_split_d_out_unevenly_only_together_runs_no_job(tmp_path, capsys) -> None:
    """Each value passes alone (d_out=6 with num_heads=2, num_heads=4 with d_out=4); the job with both is refused."""
    from attnlab.app.cli import main as cli_main

    code = cli_main(["-m", "variant=multi_head_attention,unscaled", "d_out=4,6", "num_heads=2,4",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert code == 2
    assert capsys.readouterr().err == ("attnlab: error: d_out=6: must be a multiple of num_heads=4 "
                                       "(variant 'multi_head_attention' splits d_out into num_heads heads)\n")
    assert tree(tmp_path) == set()
