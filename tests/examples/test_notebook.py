"""Issue 31: examples/notebook.ipynb executed with nbclient on a kernel of this test's venv; its
cells assert what they show (scaling, head_merge, the edited plugin, KL by hand, one-line typo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"


@pytest.mark.slow
def test_the_example_notebook_runs(tmp_path, monkeypatch):
    import nbclient
    import nbformat

    kernel = tmp_path / "kernels" / "attnlab-test"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({  # this venv's python, whatever the machine's kernels are
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "attnlab test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, kernel_name="attnlab-test", timeout=300,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()  # a failed assert raises
    text = "\n".join(out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", []))
    assert "scaling@scaled_scores" in text and "head_merge@output" in text
    assert "unknown variant 'unscald'; did you mean 'unscaled'?" in text
    shown = [out for out in notebook.cells[-3].outputs if out["output_type"] == "execute_result"]
    assert shown and "Result(variant='notebook:SelfAttention_v1'" in shown[0]["data"]["text/plain"]
    assert "<img" in shown[0]["data"].get("text/html", "")
