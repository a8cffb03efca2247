"""examples/notebook.ipynb executed on a kernel of this venv, cell by cell, in a folder of its own.

`python -m tests.examples.notebook_kernel` executes it and writes it back with its outputs: the
notebook is committed executed, and tests/examples/test_notebook.py checks that it is current."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"
KERNEL = "attnlab-notebook"


def execute(notebook: Any, folder: Path) -> Any:
    """`notebook` (an nbformat node) run in `folder` on a kernel of this venv; a failed assert raises."""
    import nbclient

    kernel = folder / "kernels" / KERNEL
    kernel.mkdir(parents=True, exist_ok=True)
    kernel.joinpath("kernel.json").write_text(json.dumps({  # this venv's python, whatever the machine's kernels are
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    os.environ["JUPYTER_PATH"] = str(folder)  # where the kernel above is found; a process of its own each time
    nbclient.NotebookClient(notebook, kernel_name=KERNEL, timeout=600,
                            resources={"metadata": {"path": str(folder)}}).execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)  # timings: a diff on every refresh
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return notebook


def shown_text(notebook: Any) -> list[list[str]]:
    """What each code cell shows as text, cell by cell: its printed lines as one text (the kernel may split
    a stream into chunks anywhere), then each result's plain form."""
    shown = []
    for cell in (c for c in notebook.cells if c.cell_type == "code"):
        outputs = cell.get("outputs", [])
        printed = "".join("".join(out.get("text", "")) for out in outputs if out.get("output_type") == "stream")
        results = ["".join(out.get("data", {}).get("text/plain", "")) for out in outputs if out.get("output_type") != "stream"]
        shown.append(([printed] if printed else []) + results)
    return shown


def main() -> None:
    import nbformat

    notebook = execute(nbformat.read(NOTEBOOK, as_version=4), Path(tempfile.mkdtemp()))
    nbformat.write(notebook, NOTEBOOK)
    print(f"executed and written: {NOTEBOOK}")


if __name__ == "__main__":
    main()
