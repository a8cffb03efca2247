"""Token embeddings: the book's six tokens, seeded random ones, and files read without pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab.app.api import compose_config
from attnlab.app.job_settings import inputs_values
from attnlab.errors import UserError
from attnlab.inputs.kinds import make_inputs


def inputs_for(*overrides: str, seed: int = 123):
    cfg = compose_config("reference", seed, overrides)
    return make_inputs(inputs_values(cfg), seed)


def test_the_book_input_is_the_sources_six_tokens_with_labels():
    inputs = inputs_for()
    assert inputs.labels == ["Your", "journey", "starts", "with", "one", "step"]
    assert inputs.embeddings[1].tolist() == pytest.approx([0.55, 0.87, 0.66])
    assert (inputs.n_tokens, inputs.d_in) == (6, 3)


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_random_inputs_are_seeded_and_leave_the_global_seed_alone(distribution):
    overrides = ("inputs=random", "inputs.n_tokens=5", "inputs.d_in=4", f"inputs.distribution={distribution}")
    torch.manual_seed(0)
    first = inputs_for(*overrides, seed=7).embeddings
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(first, inputs_for(*overrides, seed=7).embeddings)
    assert torch.equal(after, torch.rand(1))
    assert not torch.equal(first, inputs_for(*overrides, seed=8).embeddings)
    assert first.shape == (5, 4)
    assert (first.min() < 0) == (distribution == "normal")


def test_csv_with_a_label_column(tmp_path):
    path = tmp_path / "tokens.csv"
    path.write_text("Your,0.43,0.15,0.89\njourney,0.55,0.87,0.66\n")
    inputs = inputs_for("inputs=file", f"inputs.path={path}")
    assert inputs.labels == ["Your", "journey"] and inputs.embeddings.shape == (2, 3)


@pytest.mark.parametrize("content", [
    "token,a,b,c\nYour,0.43,0.15,0.89\njourney,0.55,0.87,0.66\n",  # a header row (it failed)
    "0.43,0.15,0.89,Your\n0.55,0.87,0.66,journey\n",  # the label last (it failed)
    "a,b,c,token\n0.43,0.15,0.89,Your\n0.55,0.87,0.66,journey\n",
])
def test_csv_with_a_header_row_or_the_label_last(tmp_path, content):
    path = tmp_path / "tokens.csv"
    path.write_text(content)
    inputs = inputs_for("inputs=file", f"inputs.path={path}")
    assert inputs.labels == ["Your", "journey"]
    assert inputs.embeddings.tolist() == torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66]]).tolist()


def test_csv_of_numbers_only_gets_numbered_labels(tmp_path):
    path = tmp_path / "tokens.csv"
    path.write_text("1,2\n3,4\n5,6\n")
    inputs = inputs_for("inputs=file", f"inputs.path={path}")
    assert inputs.labels == ["t0", "t1", "t2"] and inputs.embeddings.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_json_with_labels_and_embeddings(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"labels": ["a", "b"], "embeddings": [[1, 2], [3, 4]]}))
    inputs = inputs_for("inputs=file", f"inputs.path={path}")
    assert inputs.labels == ["a", "b"] and inputs.embeddings.tolist() == [[1, 2], [3, 4]]


def test_npy_is_read_without_pickle(tmp_path):
    good, evil = tmp_path / "good.npy", tmp_path / "evil.npy"
    np.save(good, np.ones((3, 2), dtype=np.float32))
    np.save(evil, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert inputs_for("inputs=file", f"inputs.path={good}").embeddings.shape == (3, 2)
    with pytest.raises(UserError, match="cannot read"):
        inputs_for("inputs=file", f"inputs.path={evil}")


@pytest.mark.parametrize(
    "content,message",
    [
        ("1,2,3\n4,5\n", "rows differ in length (2, 3)"),
        ("1,2\nx,y\n", "token row 2 holds 'y' where a number belongs"),
        ("", "no token rows"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        inputs_for("inputs=file", f"inputs.path={path}")


def test_an_unsupported_suffix_lists_the_allowed_ones(tmp_path):
    path = tmp_path / "tokens.pkl"
    path.write_bytes(b"\x80")
    with pytest.raises(UserError, match=r"unsupported file type '\.pkl'; allowed: \.csv, \.json, \.npy"):
        inputs_for("inputs=file", f"inputs.path={path}")


def test_random_inputs_draw_distinct_batch_items_after_the_two_dimensional_draw():
    from attnlab.inputs.kinds import random_inputs

    alone = random_inputs(7, "random", 5, 3, "normal")
    batched = random_inputs(7, "random", 5, 3, "normal", batch=3)
    assert torch.equal(batched.embeddings, alone.embeddings)  # a 2-D run's numbers do not move
    assert batched.items.shape == (3, 5, 3) and torch.equal(batched.items[0], alone.embeddings)
    assert not torch.equal(batched.items[1], batched.items[0])
    assert torch.equal(alone.batched(2)[1], alone.embeddings)  # without items: stacked, as the source does


def test_a_file_of_batch_items_gives_them_to_batched_modules(tmp_path):
    import numpy as np

    import attnlab

    items = np.random.default_rng(0).random((2, 4, 3)).astype(np.float32)
    np.save(tmp_path / "items.npy", items)
    result = attnlab.run("causal_batch_centred_keys", inputs="file", overrides=[f"inputs.path={tmp_path / 'items.npy'}"])
    np.testing.assert_array_equal(result.stages["inputs"], items)
    assert [f.code for f in result.findings if f.severity == "error"][:1] == ["batch_mixing"]
