"""Through the real CLI, one test per behaviour: an hf: variant runs and says what it returned; a
nanoGPT class pasted into ./plugins runs; a config attribute the class lacks is refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SIZES = ("inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64", "num_heads=4",
         "log.tensorboard=false", "log.html=false")
PLUGINS = Path(__file__).parent / "hf_plugins"


@pytest.mark.slow
def test_an_hf_variant_runs_and_says_what_its_forward_returned(app):
    run = app("variant=hf:llama", "num_kv_heads=2", *SIZES)
    assert run.returncode == 0, run.stderr
    assert "reference=gqa" in run.stdout
    assert ("returned: tuple(Tensor (2, 8, 64), Tensor (2, 4, 8, 8)); output = [0]; its attention weights: "
            "equal to the captured weights") in run.stdout
    assert [(f["code"], f["severity"]) for f in run.record["findings"]] == [("rotary", "info")]


@pytest.mark.slow
def test_nanogpts_class_pasted_into_plugins_runs_with_zero_edits(app, tmp_path):
    (tmp_path / "plugins").mkdir()
    shutil.copy(PLUGINS / "nanogpt_flash.py", tmp_path / "plugins" / "nanogpt_flash.py")
    run = app("variant=nanogpt_flash", *SIZES, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.record["findings"] == [] and run.record["status"] == "ok"


@pytest.mark.slow
def test_a_config_attribute_the_class_lacks_is_one_line_exit_2(app):
    run = app("variant=hf:mistral", "variant.params.sliding_windw=3", *SIZES)
    assert run.returncode == 2
    assert run.stderr.strip() == ("attnlab: error: variant.params.sliding_windw: MistralConfig has no attribute "
                                  "'sliding_windw'; did you mean 'sliding_window'? see python -m attnlab --help")
    assert "Traceback" not in run.stderr + run.stdout
