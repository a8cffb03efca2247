"""The config is read once, at the edge: the app turns the composed DictConfig into typed settings
(attnlab.app.job_settings), and no module below the app takes a DictConfig or imports omegaconf."""

from __future__ import annotations

import ast
from pathlib import Path

import attnlab

PACKAGE = Path(attnlab.__file__).parent
CONFIG_TYPES = {"DictConfig", "ListConfig", "DictKeyType", "Container"}


def _annotation_names(node: ast.expr | None) -> set[str]:
    """Every name an annotation spells (`DictConfig`, `omegaconf.DictConfig`, `'DictConfig | None'`)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _annotation_names(ast.parse(node.value, mode="eval").body)
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def config_uses(path: Path) -> list[str]:
    """`function(parameter)` for each parameter annotated as a config node, and each import of omegaconf."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                        *filter(None, [arguments.vararg, arguments.kwarg])]:
                if _annotation_names(arg.annotation) & CONFIG_TYPES:
                    found.append(f"{node.name}({arg.arg})")
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "omegaconf"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "omegaconf":
            found.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
    return found


def test_below_the_app_no_function_takes_the_config() -> None:
    below = [path for path in PACKAGE.rglob("*.py") if "app" not in path.relative_to(PACKAGE).parts[:1]]
    uses = {str(path.relative_to(PACKAGE)): found for path in below if (found := config_uses(path))}
    assert uses == {}


def test_the_edge_check_sees_a_config_parameter_and_an_import(tmp_path: Path) -> None:
    module = tmp_path / "pipeline.py"
    module.write_text("from __future__ import annotations\nimport omegaconf\nfrom omegaconf import DictConfig\n\n"
                      "def run(cfg: DictConfig, seed: int) -> None: ...\n\n"
                      "def layers(layer: 'omegaconf.ListConfig | None', *, n: int) -> None: ...\n\n"
                      "def fine(values: dict, config: str) -> None: ...\n")
    assert config_uses(module) == ["import omegaconf", "from omegaconf import DictConfig", "run(cfg)",
                                   "layers(layer)"]
