"""Where variants come from: the built-ins' groups and tags, plugin files that
only import a module class, plugins that fail in their decorator, sibling imports, and a plugin's
import-time output held back until it runs."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import attnlab
from attnlab.app.help_text import help_header
from attnlab.errors import UserError
from attnlab.modules.registry import discover, get_variant
from attnlab.plugin_folders import builtin_plugin_dir
from tests.conftest import SOURCE_SELF_ATTENTION_V1
from tests.modules.hf_runs import SIZES

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "behaviour.json"
GROUPS = ("variants", "modern", "implementations", "mistakes")
# The bonus notebook's nine (mha-implementations.ipynb), as attnlab names them; torch's class twice
NOTEBOOK_NINE = {"impl_mha", "impl_wrapper", "impl_combined_qkv", "impl_einsum", "impl_sdpa", "impl_sdpa_mask",
                 "impl_flex_attention", "impl_torch_mha", "impl_torch_mha_no_weights"}
# A module class a plugin imports instead of defining: SelfAttention_v1 under another name
LIBRARY = SOURCE_SELF_ATTENTION_V1.replace("SelfAttention_v1", "LibraryAttention") + "\n\nclass Unused(nn.Module):\n    pass\n"


@pytest.fixture(autouse=True)
def fresh_registry():
    discover.cache_clear()
    yield
    discover.cache_clear()


def write(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A plugin folder on ATTNLAB_PLUGIN_PATH and a library folder on sys.path."""
    folder, library = tmp_path / "my_plugins", tmp_path / "lib"
    write(library, "attnlib", LIBRARY)
    monkeypatch.syspath_prepend(str(library))
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    folder.mkdir()
    return folder


def warnings_about(name: str) -> list[str]:
    return [w for w in discover().warnings if f"{name}.py" in w]


# -- groups and tags -------------------------------------------------------------------------------

def test_every_built_in_is_in_one_group_and_the_names_are_the_ones_before_the_move():
    before = {key.split("@")[0] for key in json.loads(GOLDEN.read_text())} | {"flex_attention", "impl_flex_attention"}
    builtin = {n for n, s in discover().specs.items() if Path(s.source).is_relative_to(builtin_plugin_dir())}
    assert builtin == before
    for name in builtin:
        spec = get_variant(name)
        assert spec.group in GROUPS and Path(spec.source).parent.name == spec.group, name
        assert sum(tag in GROUPS for tag in spec.tags) == 1, (name, spec.tags)


def test_every_built_in_file_is_in_a_group_folder():
    """A file at the top of plugins/ belongs to no group, and discovery reads only the groups."""
    assert sorted(p.name for p in builtin_plugin_dir().glob("*.py")) == ["__init__.py"]
    assert sorted(p.name for p in builtin_plugin_dir().iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(GROUPS)


def test_the_groups_separate_what_a_user_runs_from_the_zoo():
    assert set(attnlab.list_variants(tag="implementations")) == NOTEBOOK_NINE
    assert {"reference", "linear", "unscaled", "wrong_softmax_axis", "causal_attention",
            "multi_head_attention", "mha_wrapper"} <= set(attnlab.list_variants(tag="variants"))
    assert {"gqa", "mqa", "rope", "alibi", "sdpa", "softcap"} <= set(attnlab.list_variants(tag="modern"))
    mistakes = attnlab.list_variants(tag="mistakes")
    # one prefix, two groups: the source's class and its copy that drops the mask
    assert "causal_attention" not in mistakes and "causal_mask_missing" in mistakes
    # each declares the finding it must trigger, but the bug the notebook's sizes hide (no finding
    # at d_in == d_out, a failed record otherwise: tests/plugins/test_mha_implementations.py)
    assert [name for name in mistakes if not get_variant(name).expected_finding] == ["impl_einsum_transposed"]
    assert set(attnlab.list_variants(tag="multi_head")) <= set(mistakes)
    assert not any(get_variant(name).expected_finding for name in NOTEBOOK_NINE)


def test_the_implementations_experiment_sweeps_the_implementations_group():
    experiment = OmegaConf.load(builtin_plugin_dir().parent / "conf" / "experiment" / "mha_implementations.yaml")
    assert sorted(experiment.hydra.sweeper.params.variant.split(",")) == attnlab.list_variants(tag="implementations")


def test_list_variants_filters_by_pattern_and_tag_and_refuses_an_unknown_tag():
    assert attnlab.list_variants("impl_wrapper*") == ["impl_wrapper", "impl_wrapper_undivided"]
    assert attnlab.list_variants("impl_wrapper*", tag="implementations") == ["impl_wrapper"]
    multi_head = attnlab.list_variants(tag="multi_head")
    assert "mha_head_merge" in multi_head and "causal_mask_missing" in multi_head and "multi_head_attention" not in multi_head
    with pytest.raises(UserError, match=r"unknown tag 'mistake'; did you mean 'mistakes'\? tags: implementations, "):
        attnlab.list_variants(tag="mistake")
    assert attnlab.list_variants(tag="yours") == []  # a group without plugins is known, and empty


@pytest.mark.slow
def test_a_plugin_declares_tags_after_its_group(plugins):
    write(plugins, "tagged", "import attnlab\n" + SOURCE_SELF_ATTENTION_V1.replace(
        "class SelfAttention_v1", "@attnlab.variant(tags=('mine', 'rotary'))\nclass SelfAttention_v1"))
    write(plugins, "plain", SOURCE_SELF_ATTENTION_V1)
    assert get_variant("tagged").tags == ("yours", "mine", "rotary")
    assert get_variant("plain").tags == ("yours",)
    assert attnlab.list_variants(tag="mine") == ["tagged"]
    assert attnlab.list_variants(tag="yours") == ["plain", "tagged"]


@pytest.mark.slow
def test_a_tag_that_is_not_a_string_fails_its_file_only(plugins):
    write(plugins, "bad_tags", """
        import attnlab, torch.nn as nn
        @attnlab.variant(tags="gqa")
        class A(nn.Module):
            pass
    """)
    write(plugins, "fine", SOURCE_SELF_ATTENTION_V1)
    (warning,) = warnings_about("bad_tags")
    assert "failed to import: TypeError: tags='gqa'; tags are a tuple of strings" in warning
    assert "fine" in attnlab.list_variants()


def help_sections(text: str) -> dict[str, list[str]]:
    """{group: the variant names listed under its heading}, in the order of the headings."""
    sections: dict[str, list[str]] = {}
    for line in text.split("\n== ")[0].splitlines():  # the variants come before Hydra's "== Config groups =="
        heading = re.match(r"(\w+) \(tag=\1\): ", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
        elif sections and re.match(r"  \S", line) and not line.startswith("  warning:"):
            current.append(line.split()[0])
    return sections


@pytest.mark.slow
def test_help_lists_each_group_under_its_heading_in_order(plugins):
    write(plugins, "mine", SOURCE_SELF_ATTENTION_V1)
    text = help_header(discover())
    sections = help_sections(text)
    assert list(sections) == [*GROUPS, "yours"]
    assert set(sections["implementations"]) == NOTEBOOK_NINE
    assert sections["yours"] == ["mine"]
    for group in GROUPS:
        assert sections[group] == attnlab.list_variants(tag=group)
    assert "[multi_head]" in text.split("  mha_head_merge ")[1].splitlines()[1]


# -- plugin files that only import a module class --------------------------------------------------

@pytest.mark.slow
def test_a_file_that_only_imports_a_module_class_is_that_variant(plugins):
    write(plugins, "from_library", "from attnlib import LibraryAttention\n")
    assert get_variant("from_library").cls.__name__ == "LibraryAttention"
    assert warnings_about("from_library") == []
    result = attnlab.run("from_library")
    assert result.record.status == "ok" and result.findings == [] and result.first_divergent_stage is None


@pytest.mark.slow
def test_an_import_only_plugin_runs_through_the_cli(app, tmp_path):
    library = write(tmp_path / "lib", "attnlib", LIBRARY)
    write(tmp_path / "plugins", "from_library", "from attnlib import LibraryAttention\n")
    run = app("variant=from_library", "log.tensorboard=false", env={"PYTHONPATH": str(library)})
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.record["status"] == "ok" and run.record["findings"] == [] and run.record["first_divergent_stage"] is None


@pytest.mark.slow
def test_a_file_importing_several_takes_the_one_named_like_the_file(plugins):
    write(plugins, "library_attention", "from attnlib import LibraryAttention, Unused\n")
    write(plugins, "several", "import torch.nn as nn\nfrom attnlib import LibraryAttention, Unused\n")
    assert get_variant("library_attention").cls.__name__ == "LibraryAttention"
    (warning,) = warnings_about("several")
    assert warning == (f"plugin {plugins / 'several.py'} imports 2 nn.Module classes (LibraryAttention, Unused) and "
                       "defines none; name the file after the one to run (e.g. library_attention.py) or import only it")
    assert "several" not in attnlab.list_variants()


@pytest.mark.slow
def test_an_inputs_factory_importing_a_module_class_is_no_variant(plugins):
    write(plugins, "embedded", """
        import torch
        from torch.nn import Embedding

        def embedded(seed, n_tokens=6, d_in=3):
            torch.manual_seed(seed)
            return Embedding(n_tokens, d_in).weight.detach()
    """)
    assert "embedded" not in attnlab.list_variants() and warnings_about("embedded") == []


@pytest.mark.slow
def test_a_file_defining_a_class_is_not_taken_over_by_what_it_imports(plugins):
    write(plugins, "subclass", "from attnlib import LibraryAttention\n\nclass Mine(LibraryAttention):\n    pass\n")
    assert get_variant("subclass").cls.__name__ == "Mine"


# -- a plugin whose decorator or defaults fail -----------------------------------------------------

BROKEN_DEFAULT = """
    import attnlab
    from torch import nn

    @attnlab.variant(params={"x": torch.zeros(1)})
    class Broken(nn.Module):
        def __init__(self, d_in, d_out, x=None):
            super().__init__()
"""


@pytest.mark.slow
def test_a_decorator_that_raises_is_one_warning_for_that_file(plugins):
    write(plugins, "broken", BROKEN_DEFAULT)
    write(plugins, "fine", SOURCE_SELF_ATTENTION_V1)
    (warning,) = warnings_about("broken")
    assert warning == f"plugin {plugins / 'broken.py'} failed to import: NameError: name 'torch' is not defined"
    assert "fine" in attnlab.list_variants() and "broken" not in attnlab.list_variants()
    assert attnlab.run("fine").record.status == "ok"


@pytest.mark.slow
def test_a_default_that_is_no_config_value_is_one_warning_for_that_file(plugins):
    write(plugins, "tensor_default", BROKEN_DEFAULT.replace("import attnlab", "import attnlab, torch"))
    (warning,) = warnings_about("tensor_default")
    assert warning.endswith("failed to import: TypeError: params['x'] is a Tensor; a default param is a number, "
                            "string, bool, None, or a list or dict of them")
    assert attnlab.run("unscaled").record.status == "ok"  # the config of every variant still composes


@pytest.mark.slow
def test_a_broken_default_is_a_warning_line_and_every_command_still_runs(app, tmp_path):
    write(tmp_path / "plugins", "broken", BROKEN_DEFAULT.replace("import attnlab", "import attnlab, torch"))
    run = app("variant=unscaled", "log.tensorboard=false")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert [line for line in run.stderr.splitlines() if "broken.py" in line] == [
        f"attnlab: warning: plugin {tmp_path / 'plugins' / 'broken.py'} failed to import: TypeError: params['x'] is a "
        "Tensor; a default param is a number, string, bool, None, or a list or dict of them"]
    assert run.record["first_divergent_stage"] == "scaled_scores"


# -- sibling imports --------------------------------------------------------------------------------

HELPERS = """
    import torch
    import torch.nn as nn

    SCALE = {scale}

    class Projections(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.W_query = nn.Parameter(torch.rand(d_in, d_out))
            self.W_key = nn.Parameter(torch.rand(d_in, d_out))
            self.W_value = nn.Parameter(torch.rand(d_in, d_out))
"""

USES_HELPERS = """
    import torch
    from {helpers} import SCALE, Projections

    class Scaled(Projections):
        def forward(self, x):
            queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
            return torch.softmax(queries @ keys.T * SCALE, dim=-1) @ values
"""


@pytest.mark.slow
def test_a_plugin_imports_its_sibling_and_the_sibling_is_no_variant(plugins):
    write(plugins, "helpers", HELPERS.format(scale="2 ** -0.5"))
    write(plugins, "a_scaled", USES_HELPERS.format(helpers="helpers"))  # sorts before helpers.py
    write(plugins, "z_scaled", USES_HELPERS.format(helpers="helpers"))
    assert discover().warnings == []
    assert "helpers" not in attnlab.list_variants()
    # one helpers module for both: the file ran once
    assert get_variant("a_scaled").cls.__mro__[1] is get_variant("z_scaled").cls.__mro__[1]
    result = attnlab.run("a_scaled")  # 2 ** -0.5 is 1/sqrt(d_k) at d_out=2: the reference
    assert result.record.status == "ok" and result.findings == [] and result.first_divergent_stage is None


@pytest.mark.slow
def test_two_folders_each_import_their_own_helpers(plugins, tmp_path, monkeypatch):
    other = tmp_path / "other_plugins"
    write(plugins, "helpers", HELPERS.format(scale="2 ** -0.5"))
    write(plugins, "scaled", USES_HELPERS.format(helpers="helpers"))
    write(other, "helpers", HELPERS.format(scale="1.0"))
    write(other, "unscaled_too", USES_HELPERS.format(helpers="helpers"))
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", f"{plugins}{os.pathsep}{other}")
    assert attnlab.run("scaled").findings == []
    assert [(f.code, f.stage) for f in attnlab.run("unscaled_too").findings] == [("scaling", "scaled_scores")]


@pytest.mark.slow
def test_a_private_sibling_is_importable_and_never_discovered(plugins):
    write(plugins, "_shared", HELPERS.format(scale="2 ** -0.5"))
    write(plugins, "scaled", USES_HELPERS.format(helpers="_shared"))
    assert discover().warnings == [] and attnlab.list_variants(tag="yours") == ["scaled"]


@pytest.mark.slow
def test_a_sibling_marked_as_a_variant_is_still_one(plugins):
    write(plugins, "helpers", textwrap.dedent(HELPERS.format(scale="2 ** -0.5")).replace(
        "class Projections", "import attnlab\n\n@attnlab.variant('projections_only')\nclass Projections"))
    write(plugins, "scaled", USES_HELPERS.format(helpers="helpers"))
    assert {"projections_only", "scaled"} <= set(attnlab.list_variants(tag="yours"))


# -- import-time output ------------------------------------------------------------------------------

CHATTY = "import sys\nprint('chatty says hello')\nprint('chatty warns', file=sys.stderr)\n" + SOURCE_SELF_ATTENTION_V1


@pytest.mark.slow
def test_import_time_output_is_held_back_and_shown_when_the_plugin_runs(plugins, capsys):
    write(plugins, "chatty", CHATTY)
    discover()
    assert capsys.readouterr() == ("", "")
    assert get_variant("chatty").output == ("chatty says hello\n", "chatty warns\n")
    attnlab.run("unscaled")
    assert "chatty" not in "".join(capsys.readouterr())
    attnlab.run("chatty")
    out, err = capsys.readouterr()
    assert out.count("chatty says hello") == 1 and err.count("chatty warns") == 1
    attnlab.run("unscaled", overrides=["reference=chatty"])
    assert capsys.readouterr().out.count("chatty says hello") == 1


@pytest.mark.slow
def test_a_stream_a_plugin_keeps_from_its_import_still_reaches_the_terminal(plugins, capsys):
    """A logging handler made at import holds the stream discovery held back: later writes pass."""
    write(plugins, "logs", "import logging, sys\n"
          "LOG = logging.getLogger('attnlab_test_logs')\nLOG.addHandler(logging.StreamHandler(sys.stdout))\n"
          "LOG.propagate = False\nLOG.warning('logs: imported')\n"
          + SOURCE_SELF_ATTENTION_V1.replace("context_vec = attn_weights @ values",
                                             "context_vec = attn_weights @ values\n        LOG.warning('logs: forward')"))
    discover()
    assert capsys.readouterr().out == ""
    attnlab.run("logs")
    out = capsys.readouterr().out
    assert out.startswith("logs: imported\n") and "logs: forward" in out


@pytest.mark.slow
def test_import_time_output_is_never_on_help_and_shown_for_its_run(app, tmp_path):
    write(tmp_path / "plugins", "chatty", CHATTY)
    help_run = app("--help")
    assert help_run.returncode == 0 and "chatty says" not in help_run.stdout + help_run.stderr
    assert "chatty" in help_run.stdout  # listed, quietly
    other = app("variant=unscaled", "log.tensorboard=false")
    assert "chatty" not in other.stdout + other.stderr
    own = app("variant=chatty", "log.tensorboard=false", out="own")
    assert own.returncode == 0, own.stderr
    assert own.stdout.startswith("chatty says hello\n") and own.stderr.startswith("chatty warns\n")


@pytest.mark.slow
def test_help_groups_the_variants_and_imports_siblings(app, tmp_path):
    write(tmp_path / "plugins", "helpers", HELPERS.format(scale="1.0"))
    write(tmp_path / "plugins", "mine", USES_HELPERS.format(helpers="helpers"))
    run = app("--help")
    assert run.returncode == 0 and run.stderr == ""
    sections = help_sections(run.stdout)
    assert list(sections) == [*GROUPS, "yours"] and sections["yours"] == ["mine"]


# -- one declaration that cannot be read never takes the folder down -------------------------------
TIMM_STYLE = '''
from torch import nn


class Attention(nn.Module):
    """timm's ViT Attention signature: a sole required `dim: int`, the rest defaulted."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False, attn_drop: float = 0.0) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        attn_weights = ((q @ k.transpose(-2, -1)) * self.head_dim ** -0.5).softmax(dim=-1)  # (B, nh, N, N)
        return self.proj((attn_weights @ v).transpose(1, 2).reshape(B, N, C))
'''


@pytest.mark.slow
def test_an_import_only_file_of_a_dim_int_class_is_a_variant_not_a_config_constructor(plugins, tmp_path):
    write(tmp_path / "lib", "timmlike", TIMM_STYLE)
    write(plugins, "timm_attention", "from timmlike import Attention\n")
    write(plugins, "mine", SOURCE_SELF_ATTENTION_V1)
    assert get_variant("timm_attention").cls.__name__ == "Attention"  # the class itself: filled by dim=d_in
    assert warnings_about("timm_attention") == [] and "mine" in attnlab.list_variants()
    result = attnlab.run("timm_attention", overrides=[*SIZES, "reference=bidirectional_attention"])
    assert result.record.status == "ok" and result.findings == [], result.record.error


@pytest.mark.slow
def test_a_constructor_that_cannot_be_read_is_a_warning_for_its_file_only(plugins, monkeypatch):
    from attnlab.modules import hf

    write(plugins, "unreadable", SOURCE_SELF_ATTENTION_V1.replace("SelfAttention_v1", "Unreadable"))
    write(plugins, "mine", SOURCE_SELF_ATTENTION_V1)
    real = hf.config_constructor

    def config_constructor(cls, name):
        if cls.__name__ == "Unreadable":
            raise TypeError("vars() argument must have __dict__ attribute")
        return real(cls, name)

    monkeypatch.setattr(hf, "config_constructor", config_constructor)
    (warning,) = warnings_about("unreadable")
    assert "Unreadable skipped" in warning and "vars() argument" in warning and len(warning) <= 200
    assert "mine" in attnlab.list_variants() and attnlab.run("mine").record.status == "ok"


def test_timm_itself_imported_by_a_plugin_file_runs(plugins):
    try:
        import timm.models.vision_transformer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - timm needs torchvision, not installable beside CPU torch 2.13 here
        pytest.skip(f"timm does not import ({type(exc).__name__}: {exc}); see docs/guide/modules.md 'timm'")
    write(plugins, "timm_vit", "from timm.models.vision_transformer import Attention\n")
    assert warnings_about("timm_vit") == []
    result = attnlab.run("timm_vit", overrides=[*SIZES, "reference=bidirectional_attention"])
    assert result.record.status == "ok" and result.findings == [], result.record.error
