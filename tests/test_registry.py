"""Plugin discovery from all four sources, naming, and the errors users meet."""

from __future__ import annotations

import textwrap

import pytest
import torch

import attnlab
from attnlab.errors import UserError
from attnlab.registry import Registry, builtin_plugin_dir, discover, get_variant
from tests.conftest import SOURCE_SELF_ATTENTION_V1


@pytest.fixture(autouse=True)
def fresh_registry():
    discover.cache_clear()
    yield
    discover.cache_clear()


def test_the_built_ins_are_registered_with_descriptions():
    names = attnlab.list_variants()
    assert {"reference", "linear", "unscaled", "wrong_softmax_axis"} <= set(names)
    assert get_variant("linear").params == {}  # qkv_bias is a top-level key now
    assert get_variant("unscaled").expected_finding == ("scaling", "scaled_scores")
    assert all(discover().specs[n].description for n in discover().specs)


def test_create_variant_builds_the_module_with_params():
    module = attnlab.create_variant("linear", 3, 2, qkv_bias=True)
    assert module.W_query.bias is not None and module(torch.rand(6, 3)).shape == (6, 2)


def test_the_source_class_pasted_verbatim_is_a_variant_named_after_its_file(plugin_folder, monkeypatch):
    folder = plugin_folder("my_attention", SOURCE_SELF_ATTENTION_V1)
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    result = attnlab.run("my_attention")
    assert result.record.status == "ok" and result.findings == []
    assert result.first_divergent_stage is None


def test_a_plugins_folder_in_the_working_folder_is_discovered(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "local_copy.py").write_text(SOURCE_SELF_ATTENTION_V1)
    monkeypatch.chdir(tmp_path)
    assert "local_copy" in attnlab.list_variants()


def test_the_decorator_names_several_variants_in_one_file(plugin_folder, monkeypatch):
    folder = plugin_folder("two", """
        import torch, torch.nn as nn
        import attnlab

        @attnlab.variant("tiny_a", description="first", params={"k": 1})
        @attnlab.variant("tiny_b", description="second", params={"k": 2})
        class Tiny(nn.Module):
            def __init__(self, d_in, d_out, k=0):
                super().__init__()
                self.k = k
            def forward(self, x):
                return x[:, :1].repeat(1, 2) * self.k
    """)
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    specs = discover().specs
    assert (specs["tiny_a"].description, specs["tiny_a"].params) == ("first", {"k": 1})
    assert (specs["tiny_b"].description, specs["tiny_b"].params) == ("second", {"k": 2})
    assert attnlab.create_variant("tiny_b", 3, 2).k == 2


def test_a_plugin_that_does_not_import_is_a_warning_and_the_rest_still_work(plugin_folder, monkeypatch):
    folder = plugin_folder("broken", "import torch\nraise ImportError('no module named flash_attn')\n")
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    registry = discover()
    assert any("broken.py failed to import: ImportError: no module named flash_attn" in w for w in registry.warnings)
    assert {"reference", "unscaled"} <= set(registry.specs)


def test_two_variants_with_one_name_fail_with_both_sources_named(plugin_folder, monkeypatch, tmp_path):
    folder = plugin_folder("unscaled", SOURCE_SELF_ATTENTION_V1)
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    with pytest.raises(UserError) as caught:
        get_variant("unscaled")
    message = str(caught.value)
    assert "variant 'unscaled' is defined twice" in message
    assert str(folder / "unscaled.py") in message and "plugins/unscaled.py" in message


def test_a_byte_identical_copy_of_a_plugin_is_not_a_duplicate(tmp_path, monkeypatch):
    """A wheel's built-ins and ./plugins of the clone it was built from hold the same files."""
    copy = tmp_path / "copies"
    copy.mkdir()
    (copy / "unscaled.py").write_bytes((builtin_plugin_dir() / "unscaled.py").read_bytes())
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(copy))
    assert "unscaled" not in discover().duplicates
    assert get_variant("unscaled").source == str(builtin_plugin_dir() / "unscaled.py")


def test_an_unknown_name_lists_the_available_names_with_the_closest_match():
    with pytest.raises(UserError, match=r"unknown variant 'refrence'; did you mean 'reference'\? available: .*linear"):
        get_variant("refrence")


def test_entry_points_of_installed_distributions_are_discovered(tmp_path, monkeypatch):
    (tmp_path / "ep_attention.py").write_text(SOURCE_SELF_ATTENTION_V1)
    dist = tmp_path / "ep_attention-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-attention\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnlab.variants]\nfrom_entry_point = ep_attention:SelfAttention_v1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = get_variant("from_entry_point")
    assert spec.cls.__name__ == "SelfAttention_v1" and spec.source.startswith("entry point from_entry_point")


def test_a_file_with_several_unmarked_classes_is_skipped_with_a_reason(plugin_folder, monkeypatch):
    folder = plugin_folder("ambiguous", SOURCE_SELF_ATTENTION_V1 + "\nclass Other(nn.Module):\n    pass\n")
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    registry = discover()
    assert "ambiguous" not in registry.specs
    assert any("defines 2 nn.Module classes (SelfAttention_v1, Other)" in w for w in registry.warnings)


def test_registry_add_keeps_every_source_of_a_duplicate():
    registry = Registry()
    spec = get_variant("reference")
    for source in ("a.py", "b.py", "c.py"):
        registry.add(type(spec)(spec.name, spec.cls, "", {}, source))
    assert registry.duplicates["reference"] == ["a.py", "b.py", "c.py"]
