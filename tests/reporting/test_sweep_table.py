"""The sweep's table at the end of a sweep fits the terminal (COLUMNS) and says where the full one is."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

HEADER = ("variant", "status", "first divergent", "findings", "|Δ output|")


def table_lines(stdout: str) -> list[str]:
    """From the header line to the `tables:` line (the summary printed at the sweep's end)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("variant "))
    return lines[start:]


@pytest.mark.parametrize("columns", [80, 120])
def test_the_sweep_table_fits_the_terminal_width(app, tmp_path, columns: int) -> None:
    sweep = tmp_path / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=reference,wrong_softmax_axis,causal_mask_after_softmax",
                 "seed=1,2", "dropout=0.0,0.1", "train=true", "log.terminal=false", "log.tensorboard=false",
                 env={"COLUMNS": str(columns)})
    assert result.returncode == 0, result.stderr
    lines = table_lines(result.stdout)
    header, *rows, last = lines
    assert header.split("  ")[0] == "variant"
    for name in ("seed", "dropout", *HEADER):  # the swept keys, dropout a config value beyond the key columns
        assert name in header, header
    assert len(rows) == 12  # one line per job: nothing wrapped mid-table
    assert all(len(line) <= columns for line in lines), max(map(len, lines))
    assert last.startswith("tables: ") and "comparison.csv" in last  # where the full table is
    assert sum(row.startswith("wrong_softmax") for row in rows) == 4  # a long name may be cut, never wrapped
    assert "train" not in header  # one value for every job: not swept


def test_a_failed_job_shows_its_error_cut_to_the_width(app, tmp_path, plugin_folder) -> None:
    folder = plugin_folder("boom", '''
        import torch

        class Boom(torch.nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.W_query = torch.nn.Parameter(torch.rand(d_in, d_out))

            def forward(self, x):
                raise ValueError("the shapes of the attention scores do not line up with anything at all " * 3)
    ''')
    result = app("-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "variant=reference,boom", "log.terminal=false",
                 "log.tensorboard=false", cwd=folder.parent, env={"COLUMNS": "80", "ATTNLAB_PLUGIN_PATH": str(folder)})
    lines = table_lines(result.stdout)
    (failed,) = [line for line in lines if line.startswith("boom")]
    assert "failed" in failed and "variant 'boom' raised" in failed and "…" in failed  # cut, not wrapped
    assert all(len(line) <= 80 for line in lines)
