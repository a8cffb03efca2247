"""User-facing errors: shown as one line, with a non-zero exit and no traceback."""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.shown_paths import display_path


class UserError(Exception):
    """A mistake in what the user asked for (a config value, a name, a file), not a bug in attnlab.

    The message names what was wrong and what is allowed, in one line.
    """

    def _render_traceback_(self) -> list[str]:
        """IPython's hook (Jupyter, JupyterLab, the IPython shell): the one line, not a traceback
        through attnlab's internals."""
        return [f"{type(self).__name__}: {self}"]


class TokensNeeded(UserError):
    """A variant that runs only at a token count of its own (a square window, the tokens its model's
    smallest input gives): the refusal, and that count, at which a run with inputs of a free size runs."""

    def __init__(self, message: str, n_tokens: int):
        super().__init__(message)
        self.n_tokens = n_tokens


class WidthNeeded(UserError):
    """A variant whose query, key and value projections all take inputs of one width of their own
    (Zamba's attention over its hidden states and embeddings side by side, a class sized by a config
    key other than hidden_size): the refusal, and that width, at which a run with inputs of a free
    size runs the whole comparison (inputs, the reference's weights, the variant)."""

    def __init__(self, message: str, d_in: int, d_out: int):
        super().__init__(message)
        self.d_in, self.d_out = d_in, d_out  # d_out: the width its query projection makes, the heads' together


class FailedRecords(Exception):
    """Records that failed (a plugin that raised or returned no context): reported after every
    output is written, with exit code 1."""

    def __init__(self, paths: list[str], missing: Sequence[str] = ()):
        shown = ", ".join(display_path(p) for p in paths)
        parts = [f"{len(paths)} failed record(s): {shown}"] if paths else []
        parts += [f"{len(missing)} job(s) without a record (run the same command again to run them)"] if missing else []
        super().__init__("; ".join(parts))
        self.paths, self.missing = list(paths), list(missing)

    _render_traceback_ = UserError._render_traceback_
