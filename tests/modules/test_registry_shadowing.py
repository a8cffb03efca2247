"""A variant of yours named after a built-in runs as yours, with one warning line, and `builtin:NAME`
reaches attnlab's own: a release that adds a built-in never breaks a working plugins folder."""

from __future__ import annotations

import shutil

import pytest

import attnlab
from attnlab import plugin_folders
from attnlab.errors import UserError
from attnlab.modules import session
from attnlab.modules.registry import discover, get_variant
from attnlab.plugin_folders import builtin_plugin_dir

# SelfAttention_v1 with its scores divided by 3 (not sqrt(d_k)): a behaviour no built-in has.
THIRDS = """
import torch
import torch.nn as nn


class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value  # (n_tokens, d_out)
        attn_weights = torch.softmax(queries @ keys.T / 3.0, dim=-1)  # (n_tokens, n_tokens)
        return attn_weights @ values  # (n_tokens, d_out)
"""
SHADOWED = {"mha_unscaled": "mistakes", "unscaled": "variants", "linear": "variants"}  # built-in: its group folder


@pytest.fixture(autouse=True)
def fresh_registry():
    discover.cache_clear()
    yield
    discover.cache_clear()


def shadow_lines(name: str) -> list[str]:
    return [w for w in discover().warnings if f"'{name}'" in w and "built-in" in w]


# linear is a built-in of the variants folder as unscaled is: only the full suite runs it too (each
# folder of yours costs a child process, the import probe)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "linear" else n for n in sorted(SHADOWED)])
def test_a_plugin_of_yours_named_after_a_built_in_runs_as_yours_with_one_warning(name, plugin_folder, use_plugins):
    folder = plugin_folder(name, THIRDS)
    use_plugins(folder)
    builtin = builtin_plugin_dir() / SHADOWED[name] / f"{name}.py"
    assert shadow_lines(name) == [f"variant '{name}' is yours ({folder / f'{name}.py'}) and runs in place of the built-in "
                                  f"({builtin}); variant=builtin:{name} runs the built-in"]
    result = attnlab.run(name, overrides=["log.tensorboard=false"])
    assert result.record.origin == str(folder / f"{name}.py")
    assert result.diagnostics["scale_observed"] == pytest.approx(1 / 3)  # yours divides by 3
    assert name in attnlab.list_variants(tag="yours")


def test_builtin_name_reaches_the_built_in_in_a_run_a_reference_and_a_sweep(plugin_folder, use_plugins):
    use_plugins(plugin_folder("unscaled", THIRDS))
    result = attnlab.run("builtin:unscaled", overrides=["log.tensorboard=false"])
    assert result.record.variant.name == "builtin:unscaled" and result.record.origin == ""
    assert result.diagnostics["scale_observed"] == 1.0  # attnlab's unscaled: no division at all
    against = attnlab.run("reference", reference="builtin:unscaled", overrides=["log.tensorboard=false"])
    assert against.record.reference.name == "builtin:unscaled"
    assert against.record.reference.diagnostics["scale_observed"] == 1.0
    swept = attnlab.sweep(variant=["builtin:unscaled", "unscaled"], overrides=["log.tensorboard=false"])
    scales = {r.record.variant.name: r.diagnostics["scale_observed"] for r in swept.results}
    assert scales == {"builtin:unscaled": 1.0, "unscaled": pytest.approx(1 / 3)}
    assert get_variant("builtin:linear").source == str(builtin_plugin_dir() / "variants" / "linear.py")  # not shadowed


def test_an_unknown_builtin_name_is_one_line_with_the_closest_built_in():
    with pytest.raises(UserError) as caught:
        get_variant("builtin:unscald")
    message = str(caught.value)
    assert message.startswith("unknown built-in variant 'builtin:unscald'; did you mean 'builtin:unscaled'?")
    assert "\n" not in message


def test_two_plugins_of_yours_with_one_name_are_refused_in_one_line_naming_both(tmp_path, monkeypatch):
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        folder.mkdir()
        (folder / "linear.py").write_text(THIRDS if folder.name == "first" else THIRDS.replace("3.0", "4.0"))
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", ":".join(map(str, folders)))
    with pytest.raises(UserError) as caught:
        attnlab.run("linear", overrides=["log.tensorboard=false"])
    assert str(caught.value) == (f"variant 'linear' is defined twice, in {folders[0] / 'linear.py'} and "
                                 f"{folders[1] / 'linear.py'}; rename one of them")
    assert shadow_lines("linear") == []  # neither of yours runs in place of the built-in: no such claim
    assert get_variant("builtin:linear").source == str(builtin_plugin_dir() / "variants" / "linear.py")


def test_a_built_in_added_by_a_release_never_breaks_your_plugin_of_that_name(plugin_folder, use_plugins, tmp_path,
                                                                            monkeypatch):
    use_plugins(plugin_folder("my_thirds", THIRDS))
    before = attnlab.run("my_thirds", overrides=["log.tensorboard=false"])
    assert before.diagnostics["scale_observed"] == pytest.approx(1 / 3) and shadow_lines("my_thirds") == []
    # the next release: attnlab's own built-ins, and a new one in the mistakes group named like yours
    release = tmp_path / "release" / "plugins"
    shutil.copytree(builtin_plugin_dir(), release, ignore=shutil.ignore_patterns("__pycache__"))
    unscaled = (release / "variants" / "unscaled.py").read_text()
    (release / "mistakes" / "my_thirds.py").write_text(unscaled.replace('"unscaled",', '"my_thirds",'))
    monkeypatch.setattr(plugin_folders, "builtin_plugin_dir", lambda: release)
    discover.cache_clear()
    after = attnlab.run("my_thirds", overrides=["log.tensorboard=false"])
    assert after.record.origin == str(tmp_path / "user_plugins" / "my_thirds.py")
    assert after.diagnostics["scale_observed"] == pytest.approx(1 / 3)
    assert len(shadow_lines("my_thirds")) == 1 and str(release / "mistakes" / "my_thirds.py") in shadow_lines("my_thirds")[0]
    new_builtin = attnlab.run("builtin:my_thirds", overrides=["log.tensorboard=false"])
    assert new_builtin.diagnostics["scale_observed"] == 1.0


def test_a_notebook_class_named_after_a_built_in_runs_as_yours_with_one_warning(monkeypatch):
    monkeypatch.setattr(session, "_VARIANTS", {})
    namespace: dict = {"__name__": "__main__"}  # a notebook cell's globals
    exec(compile("import attnlab\n" + THIRDS.replace("class SelfAttention_v1", "@attnlab.variant('linear')\nclass "
                                                     "SelfAttention_v1"), "<cell>", "exec"), namespace)
    assert shadow_lines("linear") == [f"variant 'linear' is yours ({session.NOTEBOOK}) and runs in place of the built-in "
                                      f"({builtin_plugin_dir() / 'variants' / 'linear.py'}); variant=builtin:linear runs "
                                      "the built-in"]
    result = attnlab.run("linear", overrides=["log.tensorboard=false"])
    assert result.diagnostics["scale_observed"] == pytest.approx(1 / 3) and result.record.origin == session.NOTEBOOK
    assert attnlab.run("builtin:linear", overrides=["log.tensorboard=false"]).record.origin == ""


def test_help_marks_yours_and_lists_the_built_in_it_shadows(plugin_folder, use_plugins):
    from attnlab.app.help_text import help_header

    use_plugins(plugin_folder("unscaled", THIRDS))
    lines = help_header(discover()).splitlines()
    yours = next(line for line in lines if line.split()[:1] == ["unscaled"])
    assert yours.endswith("(yours, in place of the built-in: builtin:unscaled)")
    variants_group = lines.index(next(line for line in lines if line.startswith("variants (tag=variants)")))
    builtin = next(i for i, line in enumerate(lines) if line.split()[:1] == ["builtin:unscaled"])
    assert builtin > variants_group and "builtin:unscaled" not in attnlab.list_variants()


@pytest.mark.slow
def test_the_command_line_warns_once_naming_both_files_and_the_builtin_spelling(app, tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "mha_unscaled.py").write_text(THIRDS)
    run = app("variant=mha_unscaled", "log.tensorboard=false", "log.html=false", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if line.startswith("attnlab: warning:")]
    assert warnings == [f"attnlab: warning: variant 'mha_unscaled' is yours ({tmp_path / 'plugins' / 'mha_unscaled.py'}) "
                        f"and runs in place of the built-in ({builtin_plugin_dir() / 'mistakes' / 'mha_unscaled.py'}); "
                        "variant=builtin:mha_unscaled runs the built-in"]
    assert run.record["origin"] == str(tmp_path / "plugins" / "mha_unscaled.py")


def test_your_multi_head_class_named_mha_unscaled_runs_inside_a_model(plugin_folder, use_plugins):
    """The issue's case: the book's MultiHeadAttention without the scaling, yours, swapped into a layer."""
    source = (builtin_plugin_dir() / "variants" / "multi_head_attention.py").read_text()
    unscaled = source.replace('"multi_head_attention",', '"mha_unscaled",').replace(" / keys.shape[-1] ** 0.5", "")
    assert source.count(" / keys.shape[-1] ** 0.5") == 1  # the one scaling, taken out
    folder = plugin_folder("mha_unscaled", unscaled)
    use_plugins(folder)
    result = attnlab.run("mha_unscaled", overrides=["model=hf:gpt2", "model.n_layer=2", "model.n_head=2",
                                                    "model.n_embd=32", "layer=1", "inputs=text",
                                                    "inputs.text='one two three four'", "log.tensorboard=false"])
    assert result.record.status == "ok" and result.record.origin == str(folder / "mha_unscaled.py")
    assert result.diagnostics["scale_observed"] == 1.0 and len(shadow_lines("mha_unscaled")) == 1


def test_a_notebook_class_over_your_file_of_a_built_ins_name_is_the_one_warning(plugin_folder, use_plugins, monkeypatch):
    monkeypatch.setattr(session, "_VARIANTS", {})
    use_plugins(plugin_folder("linear", THIRDS))
    namespace: dict = {"__name__": "__main__"}
    exec(compile("import attnlab\n" + THIRDS.replace("class SelfAttention_v1", "@attnlab.variant('linear')\nclass "
                                                     "SelfAttention_v1"), "<cell>", "exec"), namespace)
    assert [line.split(") and")[0] for line in shadow_lines("linear")] == [f"variant 'linear' is yours ({session.NOTEBOOK}"]
    assert get_variant("linear").source == session.NOTEBOOK
