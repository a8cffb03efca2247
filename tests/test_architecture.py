"""Extending attnlab through the real CLI: a sink and an input kind of your own with no edit to attnlab,
unknown keys refused in one line, and no import cycle in the package."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import attnlab
import hydra_plugins.attnlab_sweeper

PACKAGE = Path(attnlab.__file__).parent
# The packages whose imports the checks below read: attnlab, and its sweeper, which lives in Hydra's
# plugin namespace and calls the app (the app registers it): one more part of the app layer.
PACKAGES = {"attnlab": PACKAGE, "hydra_plugins.attnlab_sweeper": Path(hydra_plugins.attnlab_sweeper.__file__).parent}

ROW_COUNTER = '''
"""A sink of my own: how many records a job wrote, and a sweep."""
from pathlib import Path


class RowCounter:
    def __init__(self, greeting: str = "hello"):
        self.greeting = greeting

    def write(self, records, job):
        (job.dir / "row_counter.txt").write_text(f"{self.greeting} {len(records)} {records[0].variant.name}")

    def write_sweep(self, report, folder):
        (Path(folder) / "row_counter.txt").write_text(f"{self.greeting} {len(report.records)}")

    def write_training(self, result, job):
        (job.dir / "row_counter.txt").write_text(f"{self.greeting} {result.variant} {len(result.seeds)} seed(s)")

    def write_training_sweep(self, sweep, folder):
        (Path(folder) / "row_counter.txt").write_text(f"{self.greeting} {sorted(sweep.verdicts)}")
'''

RAMP = '''
import torch
from attnlab.inputs.kinds import Inputs


def ramp_inputs(seed: int, kind: str, n_tokens: int, d_in: int) -> Inputs:
    x = torch.arange(n_tokens * d_in, dtype=torch.float32).reshape(n_tokens, d_in) / (n_tokens * d_in)
    return Inputs(x, [f"r{i}" for i in range(n_tokens)])
'''


def attnlab_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnlab", *args], cwd=folder, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def own_folder(tmp_path: Path) -> Path:
    """A working folder with a sink and an input kind of its own: a class or a function in
    ./plugins/ and a YAML file in ./conf/, nothing else."""
    for path, text in {"plugins/row_counter.py": ROW_COUNTER, "plugins/ramp.py": RAMP,
                       "conf/sink/row_counter.yaml": "_target_: row_counter.RowCounter\ngreeting: hi\n",
                       "conf/inputs/ramp.yaml": "_target_: ramp.ramp_inputs\nkind: ramp\nn_tokens: 5\nd_in: 4\n"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text))
    return tmp_path


@pytest.mark.slow
def test_a_sink_of_your_own_is_switched_on_with_log_name(own_folder: Path) -> None:
    off = attnlab_in(own_folder, "hydra.run.dir=off", "log.tensorboard=false")
    assert off.returncode == 0, off.stderr
    assert not (own_folder / "off" / "row_counter.txt").exists()  # a sink of your own starts switched off
    assert "warning" not in off.stderr  # a file of ./plugins/ that holds a sink is not a broken variant

    on = attnlab_in(own_folder, "variant=unscaled", "log.row_counter=true", "log.tensorboard=false", "hydra.run.dir=on")
    assert on.returncode == 0, on.stderr
    assert (own_folder / "on" / "row_counter.txt").read_text() == "hi 1 unscaled"
    assert not list((own_folder / "on").glob("events.out.tfevents*"))  # log.tensorboard=false as documented
    assert "record: on/record.json" in on.stdout  # the built-in sinks still run, the terminal last

    sweep = attnlab_in(own_folder, "-m", "variant=reference,unscaled", "log.row_counter=true", "log.tensorboard=false",
                       "log.terminal=false", "hydra.sweep.dir=sweep")
    assert sweep.returncode == 0, sweep.stderr
    assert (own_folder / "sweep" / "row_counter.txt").read_text() == "hi 2"
    assert sorted(p.read_text() for p in (own_folder / "sweep").glob("*/row_counter.txt")) == [
        "hi 1 reference", "hi 1 unscaled"]
    assert (own_folder / "sweep" / "comparison.html").exists()
    # log.terminal=false silences the jobs; the sweep's table is printed, its paths relative as a single run's
    assert "sweep: 2 job(s) in sweep\n" in sweep.stdout
    assert "tables: sweep/comparison.csv .md .html" in sweep.stdout


@pytest.mark.slow
def test_a_sink_of_your_own_sees_a_training_run_and_a_training_sweeps_table(own_folder: Path) -> None:
    from tests.training._tiny import TINY_OVERRIDES

    sweep = attnlab_in(own_folder, "-m", "training=induction", "variant=unscaled,scaled_by_dk", "n_seeds=2",
                       *TINY_OVERRIDES, "log.row_counter=true", "log.tensorboard=false", "log.table=false",
                       "hydra.sweep.dir=sweep")
    assert sweep.returncode == 0, sweep.stderr
    assert sorted(p.read_text() for p in (own_folder / "sweep").glob("*/row_counter.txt")) == [
        "hi scaled_by_dk 2 seed(s)", "hi unscaled 2 seed(s)"]
    assert (own_folder / "sweep" / "row_counter.txt").read_text() == "hi ['scaled_by_dk', 'unscaled']"
    assert not (own_folder / "sweep" / "training_comparison.md").exists()  # log.table=false: that sink is off


@pytest.mark.slow
def test_an_option_the_sink_does_not_take_fails_before_any_work(own_folder: Path) -> None:
    bad = attnlab_in(own_folder, "log.row_counter=true", "+sink.row_counter.colour=red", "hydra.run.dir=bad")
    assert bad.returncode == 2
    assert bad.stderr.startswith("attnlab: error: sink.row_counter: cannot build row_counter.RowCounter:")
    assert "colour" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert not (own_folder / "bad" / "record.json").exists()


@pytest.mark.slow
def test_an_input_kind_of_your_own_is_one_function_and_one_yaml(own_folder: Path) -> None:
    done = attnlab_in(own_folder, "inputs=ramp", "inputs.n_tokens=3", "hydra.run.dir=ramp", "log.tensorboard=false")
    assert done.returncode == 0, done.stderr
    assert "inputs=ramp n_tokens=3 d_in=4" in done.stdout and "  r2 " in done.stdout
    bad = attnlab_in(own_folder, "inputs=nope")
    assert bad.stderr.strip() == "attnlab: error: Could not find 'inputs/nope'; Available options in 'inputs': book, file, ids, ramp, random, text"


UNKNOWN = [
    (["+num_head=4"], "num_head: unknown key; did you mean 'num_heads'?"),
    (["num_head=4"], "num_head: unknown key; did you mean 'num_heads'?"),
    (["variant=unscaled", "+sed=4"], "sed: unknown key; did you mean 'seed'?"),
    (["log.tensorbord=false"], "log.tensorbord: unknown key; did you mean 'log.tensorboard'?"),
    (["+log.tensorbord=false"], "log.tensorbord: unknown key; did you mean 'log.tensorboard'?"),
    (["inputs=random", "inputs.n_tokenz=3"], "inputs.n_tokenz: unknown key; did you mean 'inputs.n_tokens'?"),
    (["inputs=random", "+inputs.n_tokenz=3"], "inputs.n_tokenz: unknown key; did you mean 'inputs.n_tokens'?"),
    (["+show.haed=1"], "show.haed: unknown key; did you mean 'show.head'?"),
    (["+variant.params.diagonl=1"], "variant.params.diagonl: variant 'reference' takes no parameter 'diagonl'"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args,message", UNKNOWN, ids=[" ".join(a) for a, _ in UNKNOWN])
def test_an_unknown_key_is_a_one_line_error_naming_the_closest(app, args, message) -> None:
    run = app(*args)
    assert run.returncode == 2, run.stdout
    assert run.stderr.startswith(f"attnlab: error: {message}") and len(run.stderr.splitlines()) == 1, run.stderr
    assert not (run.out_dir / "record.json").exists()


@pytest.mark.slow
def test_predictions_and_experiments_are_not_unknown_keys(app) -> None:
    run = app("variant=unscaled", "expect.findings=[scaling]", "log.tensorboard=false")
    assert run.returncode == 0, run.stderr


def _ours(name: str) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in PACKAGES)


@cache  # each check reads every module: the source is parsed once for all of them
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _import_statements(path: Path, module: str) -> Iterator[tuple[str, list[str]]]:
    """(the module an import statement names, the names it takes from it: none for `import X`), at
    module level or inside functions, for every import of attnlab or its sweeper."""
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names if _ours(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                base = ".".join(module.split(".")[: -node.level] + ([base] if base else []))
            if _ours(base):
                yield base, [alias.name for alias in node.names]


def _imports(path: Path, module: str) -> set[str]:
    """The attnlab modules `path` imports, at module level or inside functions."""
    found = set()
    for base, names in _import_statements(path, module):
        found.add(base)
        found.update(f"{base}.{name}" for name in names)
    return {name for name in found if name != "attnlab"}


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = (*package.split("."), *path.relative_to(folder).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _module_graph() -> dict[str, set[str]]:
    modules = _modules()
    # an import of a package's __init__ (the public `attnlab.run`) is where a user starts, not a
    # dependency between modules: edges go to modules only
    return {name: {t for t in _imports(path, name) if t in modules and t != name and modules[t].name != "__init__.py"}
            for name, path in modules.items()}


def _top_level_names(path: Path) -> set[str] | None:
    """The names a module binds at its top level; None when it makes names on demand (`__getattr__`)."""
    names = set()
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
    return None if "__getattr__" in names else names


def _unresolved_imports(modules: dict[str, Path]) -> list[str]:
    """`module: import` for every import of a module that does not exist or a name it does not
    bind: a function-level import (the sweeper's of the app) otherwise fails only when it runs."""
    missing = []
    for name, path in modules.items():
        for base, taken in _import_statements(path, name):
            if base not in modules:
                missing.append(f"{name}: {base}")
                continue
            bound = _top_level_names(modules[base])
            missing += [f"{name}: {base}.{t}" for t in taken
                        if f"{base}.{t}" not in modules and bound is not None and t not in bound]
    return sorted(missing)


def test_the_package_has_no_import_cycle() -> None:
    graph = _module_graph()
    assert "attnlab.app.cli" in graph and "attnlab.sinks.terminal" in graph
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(node):] + [node]))
        if node in done:
            return
        for target in sorted(graph[node]):
            visit(target, path + [node])
        done.add(node)

    for module in sorted(graph):
        visit(module, [])


@pytest.mark.slow
def test_every_import_names_a_module_and_a_name_that_exist() -> None:
    assert _unresolved_imports(_modules()) == []


def test_the_import_check_sees_a_missing_module_and_a_missing_name(tmp_path: Path) -> None:
    (tmp_path / "hooks.py").write_text("from attnlab.app.run_job import check\n")
    (tmp_path / "sweeper.py").write_text("def run():\n    from attnlab.app.hooks import finish, check\n"
                                         "    from attnlab.app.job import check\n")
    modules = {"attnlab.app.hooks": tmp_path / "hooks.py", "attnlab.app.sweeper": tmp_path / "sweeper.py"}
    assert _unresolved_imports(modules) == ["attnlab.app.hooks: attnlab.app.run_job", "attnlab.app.sweeper: attnlab.app.hooks.finish",
                                            "attnlab.app.sweeper: attnlab.app.job"]


def test_the_sweeper_calls_the_app_through_an_import_the_checks_see() -> None:
    """Hydra imports the sweeper in every app, so it imports the app only when a sweep runs:
    inside a function, which these checks read as they read any import."""
    graph = _module_graph()
    assert "attnlab.app.sweep_hooks" in graph["hydra_plugins.attnlab_sweeper.attnlab_sweeper"]
    assert "hydra_plugins.attnlab_sweeper.attnlab_sweeper" in graph["attnlab.app.config_store"]


def test_the_cycle_check_sees_a_cycle_inside_a_function(tmp_path: Path) -> None:
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from attnlab.app.sweep import finish\n")
    assert "attnlab.app.sweep" in _imports(a, "attnlab.a")


@pytest.mark.slow
def test_version_names_attnlab_then_torch_and_hydra(app) -> None:
    from importlib import metadata

    import hydra
    import torch

    run = app("--version")
    assert run.returncode == 0 and run.stderr == ""
    imported = app("--version", env={"PYTHONPROFILEIMPORTTIME": "1"}).stderr
    assert "| torch" not in imported and "| hydra" not in imported  # answered from metadata: no seconds of imports
    assert run.stdout.strip() == f"attnlab {metadata.version('attnlab')} (torch {torch.__version__}, hydra-core {hydra.__version__})"


_MUTATORS = {"append", "extend", "clear", "remove", "pop", "update", "add", "insert", "setdefault", "discard"}


def _writes_to_other_modules(path: Path) -> list[str]:
    """`other_module.state.append(...)`, `other_module.state[:] = ...`, `other_module.state = ...`:
    a module writing another attnlab module's module-level state (a back channel)."""
    tree = _tree(path)
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("attnlab") for alias in node.names}
    modules |= {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names if alias.name.startswith("attnlab")}

    def of_module(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS \
                and of_module(node.func.value):
            found.append(ast.unparse(node))
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for target in targets:
            if of_module(target) or isinstance(target, ast.Subscript) and of_module(target.value):
                found.append(ast.unparse(target))
    return found


def test_no_module_writes_another_modules_state() -> None:
    """What the CLI, the sweep and the jobs tell each other goes by value (returns, exceptions)."""
    writes = {str(path.relative_to(PACKAGE)): found for path in PACKAGE.rglob("*.py") if (found := _writes_to_other_modules(path))}
    assert writes == {}


def test_the_back_channel_check_sees_one(tmp_path: Path) -> None:
    old = tmp_path / "sweep.py"
    old.write_text("from attnlab import cli\n\ndef end():\n    cli.open_sweeps.remove(1)\n    cli.failed_jobs[:] = []\n")
    assert sorted(_writes_to_other_modules(old)) == ["cli.failed_jobs[:]", "cli.open_sweeps.remove(1)"]


# The flow, lowest layer first: a module may import its own layer and the layers before it, never a
# later one (config -> inputs and weights -> modules -> captured stages -> record -> diagnosis ->
# compute -> model -> reporting -> training -> sinks -> app: a training run goes out through the sinks).
LAYERS = (
    ("attnlab.errors", "attnlab.plugin_folders", "attnlab.configured", "attnlab.file_limits", "attnlab.locks",
     "attnlab.printable", "attnlab.process_state", "attnlab.schema", "attnlab.shown_paths",
     "attnlab.drawing"),  # PNG, text and colours: infrastructure the pictures are drawn with
    ("attnlab.inputs",),
    ("attnlab.modules",),
    ("attnlab.capture",),
    ("attnlab.record",),
    ("attnlab.diagnosis",),
    ("attnlab.compute",),
    ("attnlab.model",),  # a run inside a whole model: loading, hooks, the effect on its output
    ("attnlab.reporting",),
    ("attnlab.training",),  # training runs per variant: a tiny GPT, its loop, evaluation, verdict
    ("attnlab.sinks",),  # every result's way out: records, training runs, sweep tables
    ("attnlab.app", "attnlab.__main__", "hydra_plugins.attnlab_sweeper", "attnlab.conformance",
     "attnlab.zoo"),  # the zoo survey runs the app
)


def _layer(module: str) -> int:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(f"{p}.") for p in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer of LAYERS")


def test_a_lower_layer_never_imports_a_higher_one() -> None:
    graph = _module_graph()
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items()
                    if source != "attnlab" and not source.startswith(("attnlab.plugins.", "attnlab.conf"))
                    for target in targets if _layer(target) > _layer(source))
    assert upward == []


def test_the_layer_check_sees_an_upward_import() -> None:
    assert _layer("attnlab.capture.stages") < _layer("attnlab.sinks.html")
    with pytest.raises(AssertionError):
        _layer("attnlab.elsewhere")


def _shared_file_names(root: Path) -> dict[str, list[str]]:
    """File names that two modules under `root` share (a package's __init__.py aside)."""
    paths: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            paths.setdefault(path.name, []).append(str(path.relative_to(root)))
    return {name: found for name, found in paths.items() if len(found) > 1}


def test_no_two_modules_share_a_file_name() -> None:
    """A file name says what the module holds, once: a traceback, an editor tab or a search
    names one module, never one of two `job.py`."""
    assert _shared_file_names(PACKAGE) == {}


def test_the_file_name_check_sees_a_shared_name(tmp_path: Path) -> None:
    for path in ("app/job.py", "model/job.py", "app/__init__.py", "model/__init__.py", "model/load.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    assert _shared_file_names(tmp_path) == {"job.py": ["app/job.py", "model/job.py"]}


def _sink_modules() -> set[str]:
    """The modules of the sinks the `sink` group builds (their `_target_`s)."""
    from omegaconf import OmegaConf

    from attnlab.app.config_paths import config_dir

    targets = [OmegaConf.load(path).get("_target_", "") for path in (config_dir() / "sink").glob("*.yaml")]
    return {target.rpartition(".")[0] for target in targets if target}


def test_no_sink_imports_another_sink() -> None:
    """Sinks read records and the shared views (attnlab.sinks.views, the html and model views),
    never each other: a sink is a place output goes, not a library."""
    sinks = _sink_modules()
    assert {"attnlab.sinks.terminal", "attnlab.sinks.html", "attnlab.sinks.tensorboard"} <= sinks
    graph = _module_graph()
    assert sorted(f"{s} -> {t}" for s in sinks for t in graph.get(s, ()) if t in sinks and t != s) == []
    # the views the sinks share import no sink either, or a sink would reach another through them
    views = {t for s in sinks for t in graph.get(s, ()) if t.startswith("attnlab.sinks.") and t not in sinks}
    assert sorted(f"{v} -> {t}" for v in views for t in graph.get(v, ()) if t in sinks) == []
