"""attnlab.run in a notebook gives the same config, validation and numbers as the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import attnlab
from attnlab.errors import UserError
from attnlab.record import read_record


def test_run_returns_stages_diagnostics_and_a_table():
    result = attnlab.run("unscaled", seed=123)
    assert result.stages["weights"].shape == (6, 6) and result.reference_stages["context"].shape == (6, 2)
    assert result.record.variant.shapes["weights"] == [6, 6] and result.record.reference.shapes["context"] == [6, 2]
    assert result.record.reference.name == "reference"
    assert result.diagnostics["divergence_queries"] == 0.0
    assert isinstance(result.table, pd.DataFrame) and list(result.table.index) == ["reference", "variant"]
    assert result.table.loc["variant", "first_divergent_stage"] == "scaled_scores"
    assert "unscaled" in repr(result)


def test_keyword_overrides_reach_the_config():
    result = attnlab.run("reference", seed=5, d_out=4, inputs="random", overrides=["inputs.n_tokens=9"])
    assert result.stages["context"].shape == (9, 4) and result.record.variant.shapes["context"] == [9, 4]
    assert result.stages["output"].shape == (9, 4) and result.record.config["seed"] == 5


def test_validation_equals_the_clis():
    with pytest.raises(UserError, match="d_out=0: must be a positive integer"):
        attnlab.run("reference", d_out=0)


@pytest.mark.slow
def test_numbers_equal_the_clis_record(app):
    cli = app("variant=wrong_softmax_axis", "seed=7", "log.tensorboard=false")
    assert cli.returncode == 0, cli.stderr
    from_cli = read_record(cli.out_dir / "record.json")
    from_api = attnlab.run("wrong_softmax_axis", seed=7).record
    for stage, values in from_api.variant.stages.items():
        np.testing.assert_array_equal(from_cli.variant.stages[stage], values)
    assert from_cli.variant.diagnostics.keys() == from_api.variant.diagnostics.keys()
    assert [f.code for f in from_cli.findings] == [f.code for f in from_api.findings] == ["softmax_axis"]


def test_out_dir_writes_the_same_files_as_a_job_and_neither_prints(tmp_path, capsys):
    attnlab.run("unscaled")
    attnlab.run("unscaled", out_dir=tmp_path)
    assert capsys.readouterr().out == ""  # the Result is the report, with or without out_dir
    assert (tmp_path / "record.json").exists() and (tmp_path / "comparison.csv").exists()
    assert list(tmp_path.glob("events.out.tfevents*"))
    from omegaconf import OmegaConf

    assert OmegaConf.load(tmp_path / ".hydra" / "config.yaml").variant.name == "unscaled"
    assert "variant=unscaled" in OmegaConf.load(tmp_path / ".hydra" / "overrides.yaml")
    attnlab.run("unscaled", out_dir=tmp_path / "printed", log={"terminal": True})
    assert "first divergent stage: scaled_scores" in capsys.readouterr().out


def test_log_terminal_prints_the_summary_without_an_out_dir(capsys):
    """log={"terminal": True} printed nothing unless out_dir was given."""
    attnlab.run("unscaled", seed=123, log={"terminal": True, "tensorboard": False, "table": False, "html": False})
    out = capsys.readouterr().out
    assert out.startswith("attnlab · variant=unscaled seed=123")
    assert "[scaling @ scaled_scores]" in out and "record:" not in out
    attnlab.run("unscaled", seed=123)
    assert capsys.readouterr().out == ""


def test_a_second_run_into_one_folder_is_refused_and_the_first_kept(tmp_path):
    """It overwrote the first run's record and left both runs' event files in one folder."""
    from attnlab.errors import UserError

    attnlab.run("unscaled", out_dir=tmp_path / "same")
    before = {p: p.read_bytes() for p in (tmp_path / "same").rglob("*") if p.is_file()}
    with pytest.raises(UserError, match=r"^out_dir=.*same: holds a run already \(record.json\)"):
        attnlab.run("wrong_softmax_axis", out_dir=tmp_path / "same")
    assert {p: p.read_bytes() for p in (tmp_path / "same").rglob("*") if p.is_file()} == before



WARM = """
import torch
import torch.nn as nn

from attnlab import variant

@variant("warm", params={{"temperature": {t}}})
class Warm(nn.Module):
    def __init__(self, d_in, d_out, temperature=1.0):
        super().__init__()
        self.temperature = temperature
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        return torch.softmax(x @ self.W_query / self.temperature, dim=-1)
"""


def test_a_registry_rebuilt_with_the_same_variants_composes_nothing_again_and_a_changed_one_anew():
    from hydra.core.config_store import ConfigStore

    from attnlab.app.api import compose_config
    from attnlab.modules import session
    from attnlab.modules.registry import discover

    first, registry = compose_config("unscaled", 1), discover()
    stored = ConfigStore.instance().repo["variant"]["unscaled.yaml"]
    session._VERSION[0] += 1  # as a new session (a test's own) makes it: the registry is rebuilt
    assert discover() is not registry
    assert compose_config("unscaled", 1) is first and ConfigStore.instance().repo["variant"]["unscaled.yaml"] is stored
    for temperature in (2.0, 3.0):  # a notebook's cell run twice: one name, another default
        exec(WARM.format(t=temperature), {"__name__": "__main__"})
        assert compose_config("warm", 1).variant.params.temperature == temperature
    assert compose_config("unscaled", 1) is not first  # composed again: the variants it was composed with changed
