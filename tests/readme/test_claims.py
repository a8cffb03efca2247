"""README sentences that a short run checks, beside the examples the README test runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

import attnlab
from attnlab.sinks.terminal import config_line

OFF = {"tensorboard": False, "table": False, "html": False}


def test_causal_batch_centred_keys_is_batch_mixing_on_random_inputs_and_key_index_on_the_book_s():
    """Item 8: the zoo table said batch_mixing; the book's stacked inputs are equal items."""
    random = attnlab.run("causal_batch_centred_keys", 1, inputs="random", log=OFF)
    assert (random.findings[0].code, random.findings[0].stage) == ("batch_mixing", "keys")
    book = attnlab.run("causal_batch_centred_keys", 123, log=OFF)
    assert (book.findings[0].code, book.findings[0].stage) == ("key_index", "keys")


def test_the_record_says_the_device_and_the_header_names_it_off_the_cpu():
    """Item 10: the README said the terminal header says the device; on the CPU it does not."""
    result = attnlab.run("unscaled", device="auto", log=OFF)
    assert result.record.device == "cpu" and "device=" not in config_line(result.record)
    result.record = replace(result.record, device="cuda")  # the header of a record made elsewhere
    assert " device=cuda" in config_line(result.record)


@pytest.mark.slow
def test_a_run_folder_holds_no_empty_attnlab_log(app):
    """Item 15: every run folder had an empty attnlab.log, which the README's table omits."""
    import re

    from tests.readme.examples import README

    run = app("variant=unscaled")
    assert run.returncode == 0, run.stderr
    listed = README.read_text(encoding="utf-8").split("relative to the working folder, holds:")[1].split("\n\n")[1]
    names = re.findall(r"^\| `([^`]+?)/?\*?\.?\*?` \|", listed, flags=re.MULTILINE)
    assert {"record.json", ".hydra"} <= set(names)
    for path in run.out_dir.iterdir():
        assert any(path.name.startswith(name.rstrip("*.")) for name in names), f"{path.name} is not in {names}"
