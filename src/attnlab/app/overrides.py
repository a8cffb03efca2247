"""The command line's override lines as users write them, rewritten into the ones Hydra takes."""

from __future__ import annotations

NAME_ONLY = ("hf:", "builtin:")  # variant spellings that name a class, not an option of Hydra's variant group
OPEN_BLOCKS = ("expect", "model", "reference_model", "intervene")  # open-ended keys: attnlab adds Hydra's `++` for them


def user_overrides(args: list[str]) -> list[str]:
    """`expect.context_shape=[6,2]` and `model.n_layer=2` as users write them: open-ended keys,
    which Hydra's struct mode would make them spell `++expect...`; attnlab adds the `++` for them,
    and for `variant.params.NAME` and `reference.params.NAME` (a config attribute of a config-built
    class is set with or without `+`; `reference.params` is stored as `reference_params`).
    `model=hf:gpt2` names the model: `model.name`; `variant=hf:llama` (or `builtin:NAME`) the variant: `variant.name`."""
    return [_name_only_variant(_open_key(arg)) for arg in args]


def _open_key(arg: str) -> str:
    key, eq, value = arg.lstrip("+").partition("=")
    if eq and key in OPEN_BLOCKS[1:]:
        return f"++{key}.name={value}"
    if key.startswith("reference.params."):
        return f"++reference_params.{arg.lstrip('+').removeprefix('reference.params.')}"
    opened = key.split(".")[0] in OPEN_BLOCKS or key.startswith("variant.params.")
    return f"++{arg.lstrip('+')}" if opened and "." in key and eq else arg


def _name_only_variant(arg: str) -> str:
    """`variant=hf:llama` and `variant=builtin:causal` name no option of the variant group (they are not
    members, so `+experiment=all_variants` does not sweep every model type, nor every built-in twice): they
    set the variant's name, as does a sweep's list holding one of them."""
    key, _, value = arg.partition("=")
    names = value.split(",") if "(" not in value else []
    if key.lstrip("+") == "variant" and any(name.strip().startswith(NAME_ONLY) for name in names):
        return f"variant.name={value}"
    return arg
