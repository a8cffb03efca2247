"""The guide's examples (the README, then docs/guide/'s pages in the site's order), read from their
fenced blocks, run in one temporary folder, compared.

A block is an example when it holds `$ command` lines (a shell transcript: each command's output
follows it) or `>>> ` lines (a Python session, run with doctest). A python block whose first line
is `# plugins/NAME.py` is a file: it is written there before the examples after it run. A block
whose preceding paragraph says `not run in tests: REASON` is not run; the test lists it.

Outputs are compared modulo what changes from run to run or from machine to machine: run
folders' dates and times and the temporary folder, the memory a machine has available, a
difference below 1e-6 (whether linear's output differs from the reference's by one float32 ulp
depends on the CPU's BLAS kernel: it is compared as 0) and the spaces that align a table's
columns around it; a line `...` stands for any lines. Every
example runs in one temporary folder, in README order, so a plugin written by one example is
there for the next (the README's own `mkdir -p plugins`).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

from tests.zygote_start import SOCKET_ENV, python_shim, start_zygote

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MKDOCS = ROOT / "mkdocs.yml"
FILES = Path(__file__).resolve().parent / "files"
COLUMNS = "100"  # the terminal width the README's tables are shown at
NOT_RUN = re.compile(r"not\s+run\s+in\s+tests:\s*(.+?)(?:\)|\.(?:\s|$))", re.IGNORECASE | re.DOTALL)
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
ELISION = "..."
# what differs between two runs of the same command, and what it is compared as
VOLATILE = [
    (re.compile(r"runs/(multirun/)?\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d"), r"runs/\1<date>/<time>"),
    (re.compile(r"\d+(\.\d+)? GiB is available"), "<memory> GiB is available"),
    (re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\]"), "[<time>]"),  # Hydra's log lines
    (re.compile(r"\b\d(\.\d+)?e-(0[7-9]|[1-9]\d)\b"), "0"),  # below float32 rounding of numbers near 1
    (re.compile(r" {2,}"), " "),  # the columns' alignment, which a changed width moves
]


@dataclass
class Command:
    line: str  # after "$ " or ">>> "
    shown: list[str]  # the output the README shows
    got: list[str] = field(default_factory=list)


@dataclass
class Example:
    kind: str  # "shell" | "python" | "file"
    start: int  # character offset of the block's body in the README
    end: int
    line_no: int
    commands: list[Command]
    not_run: str | None = None  # the README's reason
    body: str = ""
    path: Path = README  # the page it is on

    @property
    def name(self) -> str:
        first = self.commands[0].line if self.commands else self.body.splitlines()[0]
        return f"{self.path.relative_to(ROOT)} line {self.line_no}: {first[:60]}"


def guide() -> list[Path]:
    """The README, then the site's guide pages in its nav order: the order a user reads them in."""
    import yaml

    nav = yaml.safe_load(MKDOCS.read_text(encoding="utf-8"))["nav"]
    pages = next(entry["Guide"] for entry in nav if isinstance(entry, dict) and "Guide" in entry)
    return [README, *(ROOT / "docs" / next(iter(page.values())) for page in pages)]


def guide_text() -> str:
    """Every page of the guide, one after another: where a test looks for the table it checks."""
    return "\n\n".join(path.read_text(encoding="utf-8") for path in guide())


def guide_examples() -> list[Example]:
    found = []
    for path in guide():
        for example in examples(path.read_text(encoding="utf-8")):
            example.path = path
            found.append(example)
    return found


def examples(text: str | None = None) -> list[Example]:
    text = README.read_text(encoding="utf-8") if text is None else text
    found = []
    for match in FENCE.finditer(text):
        body = match.group(1)
        before = text[:match.start()].rstrip().rsplit("\n\n", 1)[-1]
        marked = NOT_RUN.search(before)
        reason = " ".join(marked.group(1).split()) if marked else None
        kind = ("shell" if any(line.startswith("$ ") for line in body.splitlines())
                else "python" if body.startswith(">>> ") else "file" if body.startswith("# plugins/") else None)
        if kind is None:
            if reason:
                found.append(Example("shown", match.start(1), match.end(1), text.count("\n", 0, match.start()) + 1,
                                     [], reason, body))
            continue
        found.append(Example(kind, match.start(1), match.end(1), text.count("\n", 0, match.start()) + 1,
                             _commands(body, "$ " if kind == "shell" else ">>> "),
                             reason, body))
    return found


def _commands(body: str, prompt: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.rstrip("\n").split("\n"):
        if line.startswith(prompt):
            commands.append(Command(line[len(prompt):], []))
        elif commands:
            commands[-1].shown.append(line)
    return commands


def run_all(found: list[Example], folder: Path) -> None:
    """Run every example that is not marked, in order, in `folder`; each command's output in `got`.
    A shown `python -m attnlab ...` runs in a process forked from a zygote started with the examples'
    environment (tests/zygote.py): the imports once, not once per command."""
    shim = python_shim(folder.parent / f"{folder.name}-bin")
    env = {**os.environ, "COLUMNS": COLUMNS, "EDITOR": f"{sys.executable} {FILES.parent / 'editor.py'}",
           "PATH": f"{shim}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONWARNINGS": "ignore", "ATTNLAB_PLUGIN_PATH": ""}
    env.pop("TERM", None)
    with contextmanager(start_zygote)(env) as zygote:
        _run_all(found, folder, {**env, SOCKET_ENV: zygote})


def _run_all(found: list[Example], folder: Path, env: dict) -> None:
    session: dict = {}
    for example in found:
        if example.not_run:
            continue
        if example.kind == "file":
            path = folder / example.body.splitlines()[0].removeprefix("# ").strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(example.body, encoding="utf-8")
        for command in example.commands:
            command.got = (_shell(command, folder, env) if example.kind == "shell"
                           else _python(command, folder, session))


def _shell(command: Command, folder: Path, env: dict) -> list[str]:
    line = command.line
    heredoc = re.fullmatch(r"cat (\S+)", line.split("  #")[0].strip())
    if heredoc and not (folder / heredoc.group(1)).exists() and "*" not in heredoc.group(1):
        path = folder / heredoc.group(1)  # a file the README shows with cat: written as shown
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(command.shown) + "\n", encoding="utf-8")
    done = subprocess.run(["bash", "-c", line], cwd=folder, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    out = done.stdout.replace(f"{folder}/", "")  # paths as a user sees them from the folder they ran in
    return out.rstrip("\n").split("\n") if out.strip() else []


def _python(command: Command, folder: Path, session: dict) -> list[str]:
    out = io.StringIO()
    here = Path.cwd()
    os.chdir(folder)
    try:
        with redirect_stdout(out):
            exec(compile(command.line, "<README>", "single"), session)  # "single": an expression's repr is printed
    finally:
        os.chdir(here)
    return out.getvalue().rstrip("\n").split("\n") if out.getvalue().strip() else []


def normalise(line: str) -> str:
    for pattern, replacement in VOLATILE:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def matches(shown: list[str], got: list[str]) -> bool:
    """Whether `got` is what `shown` shows: line by line after `normalise`, `...` any lines."""
    parts = [r"(?:[^\n]*\n)*?" if line.strip() == ELISION else re.escape(normalise(line)) + r"\n" for line in shown]
    return re.fullmatch("".join(parts), "".join(normalise(line) + "\n" for line in got)) is not None


def refreshed(shown: list[str], got: list[str]) -> list[str]:
    """`got` shown as the README shows it: the lines kept before the first `...` (as many as the
    README kept) and after the last one (from the last line that starts as the README's first kept
    line did, so a new line at the end does not push an old one out)."""
    marks = [i for i, line in enumerate(shown) if line.strip() == ELISION]
    if not marks:
        return got
    head, tail = shown[:marks[0]], shown[marks[-1] + 1:]
    start = len(got) - len(tail)
    if tail:
        key = normalise(tail[0]).split(":")[0]
        start = next((i for i in range(len(got) - 1, len(head) - 1, -1) if normalise(got[i]).startswith(key)), start)
    if start < len(head):
        return got
    return got[:len(head)] + [ELISION] + got[start:]


def rewrite(text: str, found: list[Example]) -> str:
    """The README with every run example's shown output replaced by what it printed (left as it
    is where the two match, so a refresh changes only what changed)."""
    pieces, at = [], 0
    for example in found:
        if example.not_run or example.kind not in ("shell", "python"):
            continue
        prompt = "$ " if example.kind == "shell" else ">>> "
        lines = []
        for command in example.commands:
            lines.append(prompt + command.line)
            lines += command.shown if matches(command.shown, command.got) else refreshed(command.shown, command.got)
        pieces += [text[at:example.start], "\n".join(lines) + "\n"]
        at = example.end
    return "".join(pieces) + text[at:]


def fresh_folder(base: Path) -> Path:
    folder = base / "readme"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder
