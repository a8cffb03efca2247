"""A model whose own forward fails at its sizes is one line naming the model's error, not attnlab's crash."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.errors import UserError

transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_a_model_that_fails_alone_is_a_one_line_error(tmp_path) -> None:
    # GPT-J rotates its first rotary_dim coordinates of each head: 64 of a head 16 wide cannot be
    config = transformers.GPTJConfig(n_embd=64, n_head=4, n_layer=2, rotary_dim=64, vocab_size=512)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with pytest.raises(RuntimeError, match="must match the size"):  # transformers alone fails the same way
        model(input_ids=torch.tensor([[1, 5, 17, 42]]))
    model.save_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"the model's own forward fails on these inputs, before attnlab changes "
                                        r"anything: RuntimeError: The size of tensor a"):
        attnlab.run(overrides=[f"model.path={tmp_path}", "inputs=ids", "inputs.ids=[1,5,17,42]",
                               "log.tensorboard=false"])
