"""Plugin discovery from all four sources, naming, and the errors users meet."""

from __future__ import annotations

import re

import pytest
import torch

import attnlab
from attnlab.errors import UserError
from attnlab.modules.registry import (
    ConstructorError,
    Registry,
    auto_reference,
    constructor_kwargs,
    constructor_signature,
    discover,
    get_variant,
)
from attnlab.plugin_folders import builtin_plugin_dir
from tests.conftest import SOURCE_SELF_ATTENTION_V1
from tests.fixtures.source import SOURCE


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


@pytest.mark.slow
def test_the_source_class_pasted_verbatim_is_a_variant_named_after_its_file(plugin_folder, monkeypatch):
    folder = plugin_folder("my_attention", SOURCE_SELF_ATTENTION_V1)
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    result = attnlab.run("my_attention")
    assert result.record.status == "ok" and result.findings == []
    assert result.first_divergent_stage is None


@pytest.mark.slow
def test_a_plugins_folder_in_the_working_folder_is_discovered(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "local_copy.py").write_text(SOURCE_SELF_ATTENTION_V1)
    monkeypatch.chdir(tmp_path)
    assert "local_copy" in attnlab.list_variants()


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_plugin_that_does_not_import_is_a_warning_and_the_rest_still_work(plugin_folder, monkeypatch):
    folder = plugin_folder("broken", "import torch\nraise ImportError('no module named flash_attn')\n")
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    registry = discover()
    assert any("broken.py failed to import: ImportError: no module named flash_attn" in w for w in registry.warnings)
    assert {"reference", "unscaled"} <= set(registry.specs)


@pytest.mark.slow
def test_a_byte_identical_copy_of_a_plugin_is_not_a_duplicate(tmp_path, monkeypatch):
    """A wheel's built-ins and ./plugins of the clone it was built from hold the same files."""
    copy = tmp_path / "copies"
    copy.mkdir()
    (copy / "unscaled.py").write_bytes((builtin_plugin_dir() / "variants" / "unscaled.py").read_bytes())
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(copy))
    assert "unscaled" not in discover().duplicates
    assert get_variant("unscaled").source == str(builtin_plugin_dir() / "variants" / "unscaled.py")


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


@pytest.mark.slow
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


# --- constructor arguments by name (top-level keys) --------------------------------------------------

TOP_LEVEL = dict(d_in=3, d_out=4, context_length=6, dropout=0.0, num_heads=2, num_kv_heads=None, qkv_bias=False)


def spec_of(plugin_folder, monkeypatch, name: str, source: str):
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(plugin_folder(name, source)))
    discover.cache_clear()
    return get_variant(name)


def test_every_two_argument_built_in_still_gets_d_in_and_d_out_positionally_and_nothing_else():
    two_argument = [s for s in discover().specs.values() if s.signature == "(d_in, d_out)"]
    assert len(two_argument) >= 12  # the bug zoo and the reference
    for spec in two_argument:
        assert constructor_kwargs(spec, TOP_LEVEL, {}) == ([3, 4], {})


@pytest.mark.slow
def test_top_level_keys_reach_a_constructor_by_name_only_when_it_takes_them(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "heads_only", """
        import torch.nn as nn
        class Heads(nn.Module):
            def __init__(self, d_in, d_out, num_heads, *, dropout=0.1, rope_base=10000):
                super().__init__()
    """)
    args, kwargs = constructor_kwargs(spec, {**TOP_LEVEL, "num_heads": 4, "dropout": 0.25}, {})
    assert (args, kwargs) == ([3, 4], {"num_heads": 4, "dropout": 0.25})
    spec.cls(*args, **kwargs)


def test_linear_takes_qkv_bias_from_the_top_level_key():
    spec = get_variant("linear")
    args, kwargs = constructor_kwargs(spec, {**TOP_LEVEL, "qkv_bias": True}, {})
    assert spec.cls(*args, **kwargs).W_query.bias is not None


def test_context_length_none_is_the_number_of_tokens():
    args, kwargs = constructor_kwargs(get_variant("causal_attention"), {**TOP_LEVEL, "context_length": None, "n_tokens": 9}, {})
    assert kwargs["context_length"] == 9
    assert get_variant("causal_attention").cls(*args, **kwargs).mask.shape == (9, 9)


@pytest.mark.parametrize("spelling", ["num_kv_heads", "n_kv_heads", "num_key_value_heads", "num_kv_groups"])
@pytest.mark.slow
def test_num_kv_heads_is_passed_under_the_constructors_own_spelling(plugin_folder, monkeypatch, spelling):
    spec = spec_of(plugin_folder, monkeypatch, "user_gqa", f"""
        import torch.nn as nn
        class GQA(nn.Module):
            def __init__(self, d_in, d_out, num_heads, {spelling}):
                super().__init__()
    """)
    assert constructor_kwargs(spec, {**TOP_LEVEL, "num_heads": 8, "num_kv_heads": 2}, {})[1] == {"num_heads": 8, spelling: 2}
    assert constructor_kwargs(spec, {**TOP_LEVEL, "num_heads": 8}, {})[1] == {"num_heads": 8, spelling: 8}  # None: num_heads


@pytest.mark.slow
def test_a_constructor_named_like_nn_multihead_attention_gets_d_in_first_and_the_heads_by_name(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "embed", """
        import torch.nn as nn
        class Embed(nn.Module):
            def __init__(self, embed_dim, num_heads, dropout=0.0):
                super().__init__()
    """)
    assert constructor_kwargs(spec, TOP_LEVEL, {}) == ([3], {"num_heads": 2, "dropout": 0.0})


@pytest.mark.slow
def test_variant_params_are_merged_over_the_plugins_default_params(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "defaults", """
        import torch.nn as nn
        import attnlab
        @attnlab.variant(params={"k": 1, "mode": "a"})
        class Defaults(nn.Module):
            def __init__(self, d_in, d_out, k, mode):
                super().__init__()
    """)
    assert constructor_kwargs(spec, TOP_LEVEL, {"k": 3}) == ([3, 4], {"k": 3, "mode": "a"})


@pytest.mark.slow
def test_a_constructor_with_kwargs_accepts_any_variant_param_but_no_top_level_key(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "anything", """
        import torch.nn as nn
        class Anything(nn.Module):
            def __init__(self, d_in, d_out, **options):
                super().__init__()
    """)
    assert constructor_kwargs(spec, TOP_LEVEL, {"window": 3}) == ([3, 4], {"window": 3})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"num_heads": 4}, "variant.params.num_heads: num_heads is a top-level key; use num_heads=4"),
        ({"qkv_bias": True}, "variant.params.qkv_bias: qkv_bias is a top-level key; use qkv_bias=true"),
        ({"n_kv_heads": 1}, "variant.params.n_kv_heads: n_kv_heads is the top-level key num_kv_heads; use num_kv_heads=1"),
        ({"dropuot": 0.1}, "variant.params.dropuot: variant 'multi_head_attention' takes no parameter 'dropuot'; "
                           "did you mean 'dropout'? its constructor is "
                           "MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)"),
    ],
)
def test_a_wrong_variant_param_is_a_one_line_user_error(params, message):
    with pytest.raises(ConstructorError) as caught:
        constructor_kwargs(get_variant("multi_head_attention"), TOP_LEVEL, params)
    assert isinstance(caught.value, UserError) and str(caught.value) == message and "\n" not in message


@pytest.mark.slow
def test_a_required_argument_attnlab_cannot_fill_names_the_param_to_set(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "user_rope", """
        import torch.nn as nn
        class Rope(nn.Module):
            def __init__(self, d_in, d_out, num_heads, rope_base):
                super().__init__()
    """)
    with pytest.raises(ConstructorError, match=r"^variant 'user_rope' needs the constructor argument 'rope_base': "
                                                r"set variant.params.rope_base=VALUE$"):
        constructor_kwargs(spec, TOP_LEVEL, {})
    assert constructor_kwargs(spec, TOP_LEVEL, {"rope_base": 500})[1] == {"num_heads": 2, "rope_base": 500}


def test_create_variant_takes_top_level_keys_and_params_alike():
    module = attnlab.create_variant("multi_head_attention", 3, 4, num_heads=4, context_length=8)
    assert module.num_heads == 4 and module.mask.shape == (8, 8)


@pytest.mark.slow
def test_constructor_signature_shows_the_parameters_without_annotations(plugin_folder, monkeypatch):
    assert get_variant("mha_wrapper").signature == "(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)"
    spec = spec_of(plugin_folder, monkeypatch, "typed", """
        import torch.nn as nn
        class Typed(nn.Module):
            def __init__(self, d_in: int, d_out: int, num_heads: int = 2) -> None:
                super().__init__()
    """)
    assert constructor_signature(spec) == "(d_in, d_out, num_heads=2)"


def test_a_signature_shows_the_variants_declared_params_not_the_class_defaults():
    """`--help` listed bidirectional_attention with causal=True, the class's default it overrides."""
    for name in ("bidirectional_attention", "causal_heads", "impl_torch_mha_no_weights"):
        spec = get_variant(name)
        assert spec.params, name
        for key, value in spec.params.items():
            assert f"{key}={value!r}" in spec.signature, (name, key, spec.signature)


# --- files with helper classes (the variant is the outermost module) --------------------------------

def source_text(*class_names: str) -> str:
    """The source's classes as published, pasted verbatim below its imports."""
    text = (SOURCE / "ch03.py").read_text()
    blocks = re.split(r"\n(?=class |#{6,})", text)
    chosen = [b for b in blocks if re.match(r"class (\w+)", b) and re.match(r"class (\w+)", b)[1] in class_names]
    assert len(chosen) == len(class_names)
    return "import torch\nimport torch.nn as nn\n\n" + "\n".join(chosen)


@pytest.mark.slow
def test_the_sources_wrapper_pasted_verbatim_is_the_variant_of_its_file_with_no_warning(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "my_wrapper", source_text("CausalAttention", "MultiHeadAttentionWrapper"))
    assert spec.cls.__name__ == "MultiHeadAttentionWrapper"
    assert not [w for w in discover().warnings if "my_wrapper" in w]


@pytest.mark.slow
def test_a_helper_built_in_a_comprehension_is_not_a_second_variant_but_a_mention_in_a_string_is_no_build(plugin_folder, monkeypatch):
    folder = plugin_folder("outer", """
        import torch, torch.nn as nn

        class Head(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.W_query = nn.Parameter(torch.rand(d_in, d_out))

        class Outer(nn.Module):
            '''Builds Head(d_in, d_out) per head.'''
            def __init__(self, d_in, d_out, num_heads=2):
                super().__init__()
                self.heads = nn.ModuleList([Head(d_in, d_out) for _ in range(num_heads)])
    """)
    plugin_folder("mentions", """
        import torch.nn as nn

        class First(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()  # Second(d_in, d_out) would be wrong here
                self.note = "Second(d_in, d_out)"

        class Second(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
    """)
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    registry = discover()
    assert registry.specs["outer"].cls.__name__ == "Outer"
    assert "mentions" not in registry.specs
    assert [w for w in registry.warnings if "mentions.py" in w] == [
        f"plugin {folder / 'mentions.py'} defines 2 nn.Module classes (First, Second); mark the variant(s) with @attnlab.variant"
    ]


# --- declared reference and the auto choice ---------------------------------------------------------

def test_the_decorator_stores_a_declared_reference_and_causal_declares_the_reference():
    assert get_variant("causal").reference == "reference"
    assert get_variant("multi_head_attention").reference is None


def built(name: str, **values):
    spec = get_variant(name)
    args, kwargs = constructor_kwargs(spec, {**TOP_LEVEL, **values}, {})
    return spec, spec.cls(*args, **kwargs)


@pytest.mark.parametrize(
    ("name", "batched", "expected"),
    [
        ("reference", False, "reference"),
        ("unscaled", False, "reference"),
        ("causal", False, "reference"),  # declared
        ("causal_attention", True, "causal_attention"),
        ("mha_wrapper", True, "mha_wrapper"),
        ("multi_head_attention", True, "multi_head_attention"),
        ("torch_mha", True, "multi_head_attention"),
    ],
)
def test_auto_reference_of_the_built_ins(name, batched, expected):
    spec, module = built(name, d_in=4 if name == "torch_mha" else 3)
    assert auto_reference(spec, module, batched) == expected


@pytest.mark.slow
def test_a_declared_reference_wins_over_the_rule(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "declared", """
        import torch.nn as nn
        import attnlab
        @attnlab.variant(reference="linear")
        class Declared(nn.Module):
            def __init__(self, d_in, d_out, num_heads):
                super().__init__()
    """)
    assert spec.reference == "linear" and auto_reference(spec, spec.cls(3, 4, 2), batched=True) == "linear"


@pytest.mark.slow
def test_auto_reference_reads_the_declaration_not_the_forward(plugin_folder, monkeypatch):
    """A wrapper with an out_proj it never calls, and an MHA that forgot its mask, are still compared
    with the source's MultiHeadAttention, which has both: the reference must not hide the bug."""
    spec = spec_of(plugin_folder, monkeypatch, "forgets", """
        import torch, torch.nn as nn

        class Head(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.W_query = nn.Linear(d_in, d_out)

        class Forgets(nn.Module):
            def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
                super().__init__()
                self.heads = nn.ModuleList([Head(d_in, d_out) for _ in range(num_heads)])
                self.out_proj = nn.Linear(d_out * num_heads, d_out * num_heads)

            def forward(self, x):
                return torch.cat([head.W_query(x) for head in self.heads], dim=-1)  # out_proj never called
    """)
    _, module = (spec, spec.cls(*constructor_kwargs(spec, TOP_LEVEL, {})[0], **constructor_kwargs(spec, TOP_LEVEL, {})[1]))
    assert auto_reference(spec, module, batched=True) == "multi_head_attention"


@pytest.mark.slow
def test_auto_reference_of_the_sources_wrapper_pasted_verbatim_is_the_wrapper(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "pasted", source_text("CausalAttention", "MultiHeadAttentionWrapper"))
    args, kwargs = constructor_kwargs(spec, TOP_LEVEL, {})
    assert auto_reference(spec, spec.cls(*args, **kwargs), batched=True) == "mha_wrapper"


@pytest.mark.slow
def test_auto_reference_without_a_head_count_is_causal_attention(plugin_folder, monkeypatch):
    spec = spec_of(plugin_folder, monkeypatch, "pasted_causal", source_text("CausalAttention"))
    args, kwargs = constructor_kwargs(spec, TOP_LEVEL, {})
    assert auto_reference(spec, spec.cls(*args, **kwargs), batched=True) == "causal_attention"


# --- descriptions: the file's own words, never a copied docstring -----------------------------------

@pytest.mark.slow
def test_an_edited_copy_of_the_reference_is_not_described_as_the_reference(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()
    text = (builtin_plugin_dir() / "variants" / "reference.py").read_text().replace("** 0.5", "")
    (tmp_path / "plugins" / "mine.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert get_variant("mine").description == "SelfAttention_v1 from mine.py"
    assert get_variant("reference").description.startswith("The source's SelfAttention_v1 (the reference")


@pytest.mark.slow
def test_a_plugin_is_described_by_its_files_first_comment_then_its_docstring_then_its_file(plugin_folder, monkeypatch):
    folder = plugin_folder("commented", "# SelfAttention_v1 without the scaling, my first try\n" + SOURCE_SELF_ATTENTION_V1)
    plugin_folder("documented", SOURCE_SELF_ATTENTION_V1.replace("(nn.Module):", "(nn.Module):\n    '''Keys from the next token.'''"))
    plugin_folder("bare", SOURCE_SELF_ATTENTION_V1)
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
    specs = discover().specs
    assert specs["commented"].description == "SelfAttention_v1 without the scaling, my first try"
    assert specs["documented"].description == "Keys from the next token."
    assert specs["bare"].description == "SelfAttention_v1 from bare.py"


@pytest.mark.slow
def test_help_lists_constructor_parameters_helper_files_and_own_descriptions(app, tmp_path):
    """Through the real CLI: the user's pasted wrapper (helper class in the file) and an edited
    copy of the reference, from ./plugins."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "mine.py").write_text((builtin_plugin_dir() / "variants" / "reference.py").read_text().replace("** 0.5", ""))
    (plugins / "my_wrapper.py").write_text(source_text("CausalAttention", "MultiHeadAttentionWrapper"))
    run = app("--help", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()

    def entry(name: str) -> tuple[str, str]:
        at = next(i for i, line in enumerate(lines) if re.match(rf"\s+{name}\s", line))
        return lines[at], lines[at + 1].strip()

    assert entry("multi_head_attention")[1] == (
        "MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)"
    )
    assert entry("torch_mha")[1] == (
        "TorchMultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, need_weights=True)"
    )
    assert entry("mine")[0].split(None, 1)[1] == "SelfAttention_v1 from mine.py"
    assert "The source's SelfAttention_v1 (the reference" in entry("reference")[0]
    assert entry("my_wrapper")[1].startswith("MultiHeadAttentionWrapper(d_in, d_out, context_length")
    assert "warning:" not in run.stdout


@pytest.mark.slow
def test_a_change_of_working_folder_shows_that_folders_plugins(tmp_path, monkeypatch):
    """discover() kept the first folder's ./plugins after a chdir: a later listing (and a sweep
    over every variant) named variants no file there declares."""
    for name in ("first", "second"):
        (tmp_path / name / "plugins").mkdir(parents=True)
        (tmp_path / name / "plugins" / f"only_{name}.py").write_text(
            "import torch.nn as nn\n\n\nclass Only(nn.Module):\n    def __init__(self, d_in, d_out):\n"
            "        super().__init__()\n\n    def forward(self, x):\n        return x\n")
    monkeypatch.chdir(tmp_path / "first")
    assert "only_first" in discover().names()
    monkeypatch.chdir(tmp_path / "second")
    names = discover().names()
    assert "only_second" in names and "only_first" not in names
