"""Replaying the unmodified forward's blocks: a forward with layer L's attention changed and the
blocks before L replayed gives bit for bit what the whole changed forward gives, in each layout
attnlab finds (Hugging Face GPT-2, Llama, OPT, GPT-NeoX, Qwen2 and Phi, nanoGPT's `transformer.h`,
the source's `trf_blocks` nn.Sequential), and the replayed blocks do not run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.inputs.text import gpt2_encoding
from attnlab.model.forward import final_hidden, replaced
from attnlab.model.locate import attention_modules
from attnlab.model.replay import BlockRecording
from tests.model.conftest import TEXT
from tests.model.learner import GPT_MODEL
from tests.model.nanogpt_style import NANOGPT_STYLE
from tests.model.test_more_models import SIZES


class Halved(nn.Module):
    """A layer's attention with its output halved: a change every later block sees."""

    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, *args, **kwargs):
        out = self.attention(*args, **kwargs)
        return (out[0] * 0.5, *out[1:]) if isinstance(out, tuple) else out * 0.5


def _namespace(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)  # the test's own model source, as ./models/ would hold it
    return namespace


def hf_gpt2(folder) -> nn.Module:
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager")


def hf_llama(_folder) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=50257, attn_implementation="eager")
    return LlamaForCausalLM(config)


def hf_more(model_type: str):
    """A tiny causal LM of another layout (OPT, GPT-NeoX, Qwen2, Phi), as tests/model/test_more_models.py makes it."""
    def build(_folder) -> nn.Module:
        from transformers import AutoConfig, AutoModelForCausalLM

        torch.manual_seed(0)
        config = AutoConfig.for_model(model_type, vocab_size=50257, **SIZES[model_type])
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return build


def nanogpt(_folder) -> nn.Module:
    torch.manual_seed(0)
    space = _namespace(NANOGPT_STYLE)
    return space["GPT"](space["GPTConfig"]())


def learner(_folder) -> nn.Module:
    torch.manual_seed(0)
    space = _namespace(GPT_MODEL)
    return space["GPTModel"](space["GPT_CONFIG"])


def _recorded(model: nn.Module, ids: torch.Tensor, hf: bool) -> tuple[list[str], BlockRecording]:
    names = [name for name, _ in attention_modules(model)]
    recording = BlockRecording.of(names)
    with recording.recording(model, len(names) - 1):
        final_hidden(model, ids, hf)
    return names, recording


def _block_calls(model: nn.Module, blocks: list[str]) -> tuple[list[int], list]:
    calls = [0] * len(blocks)

    def counter(index: int):
        def count(_module, _args):
            calls[index] += 1
        return count

    return calls, [model.get_submodule(name).register_forward_pre_hook(counter(i)) for i, name in enumerate(blocks)]


@pytest.mark.parametrize("build,hf", [(hf_gpt2, True), (hf_llama, True), *[(hf_more(t), True) for t in SIZES],
                                      (nanogpt, False), (learner, False)],
                         ids=["hf-gpt2", "hf-llama", *[f"hf-{t}" for t in SIZES], "nanogpt", "source-trf_blocks"])
def test_a_replayed_forward_is_the_whole_changed_forward_bit_for_bit(tiny_gpt2, build, hf) -> None:
    model = build(tiny_gpt2).eval()
    ids = torch.tensor([gpt2_encoding().encode(TEXT)])  # (1, T)
    names, recording = _recorded(model, ids, hf)
    base = final_hidden(model, ids, hf)[0].hidden
    for layer, name in enumerate(names):
        halved = Halved(model.get_submodule(name))
        with replaced(model, name, halved):
            whole = final_hidden(model, ids, hf)[0].hidden
        calls, hooks = _block_calls(model, recording.blocks)
        with replaced(model, name, halved), recording.replaying(model, layer):
            replayed = final_hidden(model, ids, hf)[0].hidden
        for hook in hooks:
            hook.remove()
        assert not torch.equal(whole, base)  # the change reaches the output
        assert torch.equal(replayed, whole), (name, float((replayed - whole).abs().max()))
        assert calls == [0] * layer + [1] * (len(names) - layer)  # the blocks before the layer never ran


class Block(nn.Module):
    def __init__(self, gain: float) -> None:
        super().__init__()
        self.attn, self.gain = nn.Linear(8, 8), gain

    def forward(self, x):
        return x + torch.tanh(self.attn(x))


class Stack(nn.Module):
    """Blocks run `rounds` times over (shared weights when twice), the model reading each block's `gain`."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.h, self.rounds = nn.ModuleList(Block(1.0 + index) for index in range(3)), rounds

    def forward(self, x):
        for _ in range(self.rounds):
            for block in self.h:
                x = block.gain * block(x)
        return x


def _stack_forwards(rounds: int) -> tuple[BlockRecording, torch.Tensor, torch.Tensor]:
    """(its recording, the whole forward with layer 2 changed, the same with the blocks replayed)."""
    torch.manual_seed(0)
    model, x = Stack(rounds).eval(), torch.randn(1, 5, 8)  # (1, T, d)
    recording = BlockRecording.of([name for name, _ in attention_modules(model)])
    with torch.no_grad():
        with recording.recording(model, 2):
            model(x)
        with replaced(model, "h.2.attn", Halved(model.h[2].attn)):
            whole = model(x)
            with recording.replaying(model, 2):
                replayed = model(x)
    return recording, whole, replayed


def test_a_replayed_block_answers_for_the_attributes_the_model_reads() -> None:
    recording, whole, replayed = _stack_forwards(rounds=1)
    assert recording.replayable(2) == (0, 1)
    assert torch.equal(replayed, whole)


def test_a_model_that_runs_its_blocks_twice_replays_none() -> None:
    recording, whole, replayed = _stack_forwards(rounds=2)
    assert recording.replayable(2) == ()
    assert torch.equal(replayed, whole)
