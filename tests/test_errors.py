"""A user's mistake in IPython and Jupyter is the CLI's one line, not a traceback through attnlab."""

from __future__ import annotations

import pytest

IPython = pytest.importorskip("IPython")


def test_a_mistake_in_a_notebook_cell_prints_one_line(capsys) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        result = shell.run_cell("import attnlab\nattnlab.run(variant='no_such_variant')")
    finally:
        InteractiveShell.clear_instance()
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    from attnlab.errors import UserError

    assert isinstance(result.error_in_exec, UserError)
    error = result.error_in_exec
    assert shown == [f"{type(error).__name__}: {error}"] and "unknown variant 'no_such_variant'" in shown[0]
