"""Every `python -m attnlab` command the README and the guide show, the ones their tests do not
run included, reads as its page means when pasted into bash: bash splits it (quotes and all) and
Hydra's own override parser reads each word; a value Hydra would take for a sweep (an unquoted
comma) appears only in a `-m` command. A command that fails here fails for the user who pastes it."""

from __future__ import annotations

import re
import subprocess

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from tests.readme.examples import guide_examples

COMMANDS = [command.line for example in guide_examples() if example.kind == "shell" for command in example.commands
            if re.match(r"(python -m attnlab|attnlab)\s", command.line) and " compare " not in f" {command.line} "]


def bash_words(line: str) -> list[str]:
    """The words bash passes to the command, after its quoting and expansions."""
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("line", COMMANDS)
def test_a_documented_command_is_read_as_written(line: str) -> None:
    words = bash_words(line.split(" | ")[0].split(" && ")[0])
    arguments = words[words.index("attnlab") + 1:]  # after `python -m attnlab`: its own -m is a sweep's
    overrides = [w for w in arguments if not w.startswith("-")]
    parsed = OverridesParser.create().parse_overrides(overrides)  # raises on what Hydra cannot read
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    assert not sweeps or {"-m", "--multirun"} & set(arguments), f"{sweeps}: a comma makes a sweep; quote the value (see docs)"
