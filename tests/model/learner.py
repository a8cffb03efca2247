"""The learner's model, written from the source's ch. 4 description (GPTModel, TransformerBlock,
LayerNorm, GELU, FeedForward) around the source's MultiHeadAttention (ch03.py, verbatim), and
the source's ch. 5 way of loading GPT-2's weights into it, with the classic mistakes as switches."""

from __future__ import annotations

import torch

from tests.fixtures.source import SOURCE


def _mha_source() -> str:
    text = (SOURCE / "ch03.py").read_text()
    start = text.index("class MultiHeadAttention(nn.Module):")
    end = text.index("######################", start)
    return text[start:end]


GPT_MODEL = '''
import torch
import torch.nn as nn

GPT_CONFIG = {"vocab_size": 50257, "context_length": 64, "emb_dim": 64, "n_heads": 4, "n_layers": 2,
              "drop_rate": 0.0, "qkv_bias": True}


''' + _mha_source() + '''

class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)
        return self.scale * norm_x + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                    nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(d_in=cfg["emb_dim"], d_out=cfg["emb_dim"], context_length=cfg["context_length"],
                                      num_heads=cfg["n_heads"], dropout=cfg["drop_rate"], qkv_bias=cfg["qkv_bias"])
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        shortcut = x
        x = self.norm1(x)
        x = self.att(x)
        x = self.drop_shortcut(x)
        x = x + shortcut
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.drop_shortcut(x)
        return x + shortcut


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        tok_embeds = self.tok_emb(in_idx)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = self.drop_emb(tok_embeds + pos_embeds)
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        return self.out_head(x)
'''


def gpt2_into_learner(hf_state: dict[str, torch.Tensor], n_layers: int, *, order: str = "qkv", transpose: bool = True,
                      bias: bool = True, at: int | None = None) -> dict[str, torch.Tensor]:
    """The learner's state_dict from a Hugging Face GPT-2's, the source's ch. 5 way (c_attn split in
    three along its last axis, every Conv1D weight transposed). At layer `at` (every layer if
    None): `order` the split read in another order, `transpose=False` c_attn's pieces copied
    without .T, `bias=False` the q/k/v biases left out (zeros)."""
    g = lambda name: hf_state[f"transformer.{name}"].clone()  # noqa: E731
    state = {"tok_emb.weight": g("wte.weight"), "pos_emb.weight": g("wpe.weight"),
             "final_norm.scale": g("ln_f.weight"), "final_norm.shift": g("ln_f.bias"),
             "out_head.weight": g("wte.weight")}
    for b in range(n_layers):
        wrong = at is None or at == b
        h, t = f"h.{b}", f"trf_blocks.{b}"
        pieces = dict(zip("qkv", torch.chunk(g(f"{h}.attn.c_attn.weight"), 3, dim=-1)))
        biases = dict(zip("qkv", torch.chunk(g(f"{h}.attn.c_attn.bias"), 3, dim=-1)))
        taken = order if wrong else "qkv"
        for role, source in zip(("W_query", "W_key", "W_value"), taken):
            state[f"{t}.att.{role}.weight"] = pieces[source].T.contiguous() if transpose or not wrong else pieces[source].contiguous()
            state[f"{t}.att.{role}.bias"] = biases[source] if bias or not wrong else torch.zeros_like(biases[source])
        state |= {f"{t}.att.out_proj.weight": g(f"{h}.attn.c_proj.weight").T.contiguous(),
                  f"{t}.att.out_proj.bias": g(f"{h}.attn.c_proj.bias"),
                  f"{t}.ff.layers.0.weight": g(f"{h}.mlp.c_fc.weight").T.contiguous(), f"{t}.ff.layers.0.bias": g(f"{h}.mlp.c_fc.bias"),
                  f"{t}.ff.layers.2.weight": g(f"{h}.mlp.c_proj.weight").T.contiguous(), f"{t}.ff.layers.2.bias": g(f"{h}.mlp.c_proj.bias"),
                  f"{t}.norm1.scale": g(f"{h}.ln_1.weight"), f"{t}.norm1.shift": g(f"{h}.ln_1.bias"),
                  f"{t}.norm2.scale": g(f"{h}.ln_2.weight"), f"{t}.norm2.shift": g(f"{h}.ln_2.bias")}
    return state
