"""`python -m attnlab` and the `attnlab` command."""

import os
import sys

from attnlab.app.streams import ensure_std_streams

ensure_std_streams()  # before any import opens a file: see attnlab.app.streams

from attnlab.app.help_cache import HELP_ARGS, cached_help  # noqa: E402
from attnlab.app.job_worker import start_early, stop_early  # noqa: E402
from attnlab.app.lifeline import mark_command  # noqa: E402


def main() -> None:
    """The job forkserver, when the command needs one, imports torch beside this process (which
    imports it too, with the app): the sweep's first job then waits for neither."""
    if sys.argv[1:] in HELP_ARGS:  # kept from an earlier --help while nothing it is made from changed
        printed = cached_help(sys.argv[1:])
        if printed is not None:
            try:
                sys.stdout.write(printed)
                sys.stdout.flush()
            except BrokenPipeError:  # `--help | head -1`: the reader has what it wanted
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
    if sys.argv[1:2] in (["--version"], ["-V"]):
        from attnlab.app.versions import versions

        print(versions())
        sys.exit(0)
    mark_command()  # before any process starts: each inherits it and ends with this one
    started = start_early(sys.argv[1:])
    from attnlab.app.cli import entry

    entry(on_exit=stop_early if started else None)


if __name__ == "__main__":
    main()
