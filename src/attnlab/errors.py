"""User-facing errors: shown as one line, with a non-zero exit and no traceback."""


class UserError(Exception):
    """A mistake in what the user asked for (a config value, a name, a file), not a bug in attnlab.

    The message names what was wrong and what is allowed, in one line.
    """



class FailedRecords(Exception):
    """Records that failed (a plugin that raised or returned no context): reported after every
    output is written, with exit code 1."""

    def __init__(self, paths: list[str]):
        super().__init__(f"{len(paths)} failed record(s): {', '.join(paths)}")
        self.paths = list(paths)
