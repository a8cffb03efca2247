"""User-facing errors: shown as one line, with a non-zero exit and no traceback."""


class UserError(Exception):
    """A mistake in what the user asked for (a config value, a name, a file), not a bug in attnlab.

    The message names what was wrong and what is allowed, in one line.
    """

