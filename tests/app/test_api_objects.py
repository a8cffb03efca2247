"""attnlab.run with the objects a notebook holds (classes, instances, a session's
@attnlab.variant), plugin files followed by content, and mistakes in one line."""

from __future__ import annotations

import copy
import os
import textwrap

import pytest
import torch
from torch import nn

import attnlab
from attnlab.errors import UserError

# The book's six embedded tokens, "Your journey starts with one step" (ch. 3), typed from the source.
BOOK_INPUTS = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                            [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])


class Unscaled(nn.Module):
    """The book's SelfAttention_v1 with the scaling left out."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value  # (T, d_out)
        attn_weights = torch.softmax(queries @ keys.T, dim=-1)  # changed: no / sqrt(d_k); (T, T)
        return attn_weights @ values  # (T, d_out)


def codes(result: attnlab.Result) -> list[str]:
    return [f"{f.code}@{f.stage}" for f in result.findings]


def test_a_class_runs_positionally_and_by_keyword():
    for result in (attnlab.run(Unscaled), attnlab.run(variant=Unscaled)):
        assert "scaling@scaled_scores" in codes(result)
        assert result.record.origin.startswith(f"{__name__}.Unscaled (") and result.record.origin.endswith(".py)")


def test_an_instance_runs_as_a_copy_and_is_never_changed():
    torch.manual_seed(0)
    mine = Unscaled(3, 2)
    before = copy.deepcopy(mine.state_dict())
    assert "scaling@scaled_scores" in codes(attnlab.run(mine))  # the reference's weights, in a copy
    assert all(torch.equal(before[k], v) for k, v in mine.state_dict().items())


def test_an_instance_with_its_own_weights_gives_its_own_output():
    torch.manual_seed(1)
    mine = Unscaled(3, 2)
    result = attnlab.run(mine, weights="native")
    with torch.no_grad():
        expected = mine(BOOK_INPUTS)  # the instance itself, by hand
    torch.testing.assert_close(torch.from_numpy(result.stages["output"]), expected)


def test_a_reference_object_is_compared_against():
    result = attnlab.run("unscaled", reference=Unscaled)  # the same change on both sides
    assert result.record.reference.name == "notebook:Unscaled"
    assert result.diagnostics["divergence_output"] == 0.0 and result.first_divergent_stage is None


def test_a_session_variant_is_registered_by_its_decorator():
    ns: dict = {"__name__": "__main__", "attnlab": attnlab, "Unscaled": Unscaled}
    exec(textwrap.dedent('''
        @attnlab.variant("mine_in_a_cell")
        class Mine(Unscaled):
            pass
    '''), ns)  # a class defined in a notebook cell has __module__ "__main__"
    result = attnlab.run("mine_in_a_cell")
    assert "scaling@scaled_scores" in codes(result) and result.record.origin == "<notebook>"


PLUGIN = '''
import torch
from torch import nn


class Edited(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
        attn_weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** SCALE, dim=-1)
        return attn_weights @ values
'''


@pytest.mark.slow
def test_a_plugin_file_edited_or_added_is_read_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plugins").mkdir()
    path = tmp_path / "plugins" / "edited.py"
    path.write_text(PLUGIN.replace("SCALE", "0.0"))  # changed: no scaling
    assert "scaling@scaled_scores" in codes(attnlab.run("edited"))
    stat = path.stat()
    path.write_text(PLUGIN.replace("SCALE", "0.5"))  # the book's scaling, same size and time
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert codes(attnlab.run("edited")) == []
    (tmp_path / "plugins" / "later.py").write_text(PLUGIN.replace("SCALE", "0.0").replace("Edited", "Later"))
    assert "scaling@scaled_scores" in codes(attnlab.run("later"))


@pytest.mark.parametrize("call, line", [
    (dict(variant="unscald"), "unknown variant 'unscald'; did you mean 'unscaled'?"),
    (dict(d_ot=3), "d_ot: unknown key; did you mean 'd_out'?"),
    (dict(n_tokens=9), 'write inputs={"kind": "random", "n_tokens": 9}'),
    (dict(variant=["unscaled", "linear"]), "attnlab.sweep(variant=['unscaled', 'linear'])"),
    (dict(variant="unscaled,linear"), "attnlab.sweep(variant=['unscaled', 'linear'])"),
    (dict(seed=[1, 2]), "attnlab.sweep(seed=[1, 2])"),
    (dict(variant=3), "a variant is a name, an nn.Module class or an nn.Module instance"),
])
def test_a_mistake_is_one_line(call, line):
    with pytest.raises(UserError) as caught:
        attnlab.run(**call)
    assert line in str(caught.value) and "\n" not in str(caught.value)


def test_inputs_keys_in_their_block_work():
    assert attnlab.run(Unscaled, inputs={"kind": "random", "n_tokens": 9}).stages["output"].shape == (9, 2)


def test_an_in_memory_model_runs_at_a_layer_with_its_own_attention_copied():
    from tests.model.learner import GPT_MODEL  # the source's ch. 4 GPTModel around its MultiHeadAttention

    ns: dict = {"__name__": "__main__"}
    exec(GPT_MODEL, ns)
    torch.manual_seed(0)
    gpt = ns["GPTModel"]({**ns["GPT_CONFIG"], "n_layers": 2, "emb_dim": 16, "n_heads": 2, "vocab_size": 50257})
    before = copy.deepcopy(gpt.state_dict())
    text = {"kind": "text", "text": "Every effort moves you"}
    results = attnlab.run("multi_head_attention", model=gpt, layer="all", inputs=text)
    assert [r.record.model.layer for r in results] == [0, 1]
    assert "layer=0" in repr(results[0]) and "layer=1" in repr(results[1])
    for result in results:  # the book's own class at the model's layer: the model's output unchanged
        assert result.record.model.effect.kl_max == pytest.approx(0.0, abs=1e-6)
    from attnlab.model.tokens import gpt2_encoding  # tiktoken's GPT-2 BPE from the files attnlab ships

    ids = torch.tensor([gpt2_encoding().encode(text["text"])])  # (1, T)
    with torch.no_grad():  # layer 0's attention output by hand: the model's own block on its embeddings
        x = gpt.tok_emb(ids) + gpt.pos_emb(torch.arange(ids.shape[1]))  # (1, T, emb_dim)
        expected = gpt.trf_blocks[0].att(gpt.trf_blocks[0].norm1(x))  # (1, T, emb_dim)
    output = torch.from_numpy(results[0].stages["output"]).reshape(expected.shape)
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(before[k], v) for k, v in gpt.state_dict().items())
