"""The text of `--help`: the variants by group, the config groups to pick from, every key of the schema."""

from __future__ import annotations

from dataclasses import replace

from attnlab.app.config_paths import group_options
from attnlab.modules.registry import Registry
from attnlab.modules.variant_spec import BUILTIN
from attnlab.plugin_folders import USER_GROUP, builtin_groups, group_heading
from attnlab.printable import escaped
from attnlab.schema import CHOICE_KEYS, KEYS, show_value


def help_header(registry: Registry) -> str:
    """The variants by group (the built-ins' folders, then yours), each with its description,
    constructor and declared tags (a variant of yours named after a built-in is marked, the built-in
    listed as builtin:NAME); then the names defined twice and the plugins that failed."""
    hidden = [replace(spec, name=f"{BUILTIN}{name}") for name, spec in registry.shadowed.items()]
    width = max((len(n) for n in [*registry.names(), *(spec.name for spec in hidden)]), default=0)
    lines = []
    for group in [*builtin_groups(), USER_GROUP]:
        specs = [spec for spec in [*registry.specs.values(), *hidden] if spec.group == group]
        if specs:
            lines += ["", f"{group} (tag={group}): {group_heading(group)}"]
        for spec in sorted(specs, key=lambda s: s.name):
            tags = f"  [{', '.join(spec.tags[1:])}]" if spec.tags[1:] else ""
            shadows = f" (yours, in place of the built-in: {BUILTIN}{spec.name})" if spec.name in registry.shadowed else ""
            lines += [f"  {spec.name.ljust(width)}  {spec.description}{shadows}",
                      f"  {''.ljust(width)}  {spec.cls.__name__}{spec.signature}{tags}"]
    lines += [f"  {name.ljust(width)}  (defined twice: {' and '.join(srcs)})" for name, srcs in registry.duplicates.items()]
    lines += [f"  warning: {warning}" for warning in registry.warnings]
    lines = [escaped(line) for line in lines]  # a plugin's description and name: never a terminal's control
    return "\n".join(
        [
            "attnlab: see what a change to self-attention does, stage by stage.",
            "",
            "Usage: python -m attnlab [variant=NAME] [seed=N] [d_out=N] [inputs=book|random|file|text] [key=value ...]",
            "       python -m attnlab -m variant=reference,unscaled seed=1,2,3     (a sweep)",
            "       attnlab compare PATH... [--out FILE] [--filter key=value]",
            "",
            "Variants (variant=NAME; params as variant.params.KEY=VALUE), by group; in Python",
            "attnlab.list_variants(tag=GROUP) lists a group, or a [tag] shown after a constructor.",
            "Any Hugging Face attention class, built from its config class: variant=hf:MODEL_TYPE (e.g. hf:llama),",
            "attn_implementation=eager|sdpa, config attributes as variant.params.NAME (pip install 'attnlab[hf]').",
            *lines,
        ]
    )


def groups_help() -> str:
    """The config groups a user picks from (the input schemas attnlab registers are left out)."""
    lines = []
    for group, what in (("inputs", "inputs=NAME"), ("training", "training=NAME"), ("sink", "switched by log.NAME"),
                        ("experiment", "+experiment=NAME")):
        builtin, own = group_options(group)
        yours = f"; yours: {', '.join(own)}" if own else ""
        lines.append(f"{group} ({what}): {', '.join(builtin)}{yours}")
    return "\n".join(lines)


def keys_help() -> str:
    """Every key of the schema: its default, what is allowed, what it does."""
    width = max(len(key.name) for key in KEYS)
    keys = [(key.name, show_value(key.default), key.allowed, key.help) for key in KEYS]
    keys += [(key.name, key.default.value, key.allowed, key.help) for key in CHOICE_KEYS]
    return "\n".join(f"{name.ljust(width)}  default {default}; {allowed}; {what}" for name, default, allowed, what in keys)
