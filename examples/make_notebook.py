"""Writes examples/notebook.ipynb from the cells below (run it after editing them)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    ("md", "# attnlab in a notebook\n\nYour classes, instances and models, straight from the cells: no files, no restart."),
    ("code", """import os, tempfile, textwrap
import torch
import torch.nn as nn
import attnlab
from attnlab.errors import UserError

os.chdir(tempfile.mkdtemp())  # a fresh working folder: ./plugins below is this notebook's own"""),
    ("md", "## 1. The book's `SelfAttention_v1`, with the scaling left out"),
    ("code", """class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key  # (T, d_out)
        queries = x @ self.W_query  # (T, d_out)
        values = x @ self.W_value  # (T, d_out)
        attn_scores = queries @ keys.T  # (T, T)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # changed: no / keys.shape[-1]**0.5
        context_vec = attn_weights @ values  # (T, d_out)
        return context_vec

from_class = attnlab.run(SelfAttention_v1)  # built from the config under the seed, as a plugin's
from_instance = attnlab.run(SelfAttention_v1(3, 2))  # a copy of it, with the reference's weights
for result in (from_class, from_instance):
    print(result)
    assert "scaling@scaled_scores" in [f"{f.code}@{f.stage}" for f in result.findings]"""),
    ("md", "## 2. The book's `MultiHeadAttention`, heads merged without the transpose"),
    ("code", """class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, nh, T, hs)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, nh, T, hs)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, nh, T, hs)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, nh, T, T)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))  # (b, nh, T, T)
        context_vec = attn_weights @ values  # (b, nh, T, hs)
        context_vec = context_vec.reshape(b, num_tokens, self.d_out)  # changed: no .transpose(1, 2) first
        return self.out_proj(context_vec)  # (b, T, d_out)

merged = attnlab.run(MultiHeadAttention, d_out=4)
print(merged)
assert "head_merge@output" in [f"{f.code}@{f.stage}" for f in merged.findings]"""),
    ("md", "## 3. A plugin file, edited between two runs: the second run reads the new code"),
    ("code", """PLUGIN = '''
import torch
from torch import nn

class Mine(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
        attn_weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** POWER, dim=-1)
        return attn_weights @ values
'''
os.makedirs("plugins", exist_ok=True)
with open("plugins/mine.py", "w") as f:
    f.write(PLUGIN.replace("POWER", "0.0"))  # no scaling
before = attnlab.run("mine")
with open("plugins/mine.py", "w") as f:
    f.write(PLUGIN.replace("POWER", "0.5"))  # the book's scaling
after = attnlab.run("mine")
print(before, after, sep="\\n")
assert [f.code for f in before.findings] == ["scaling"] and after.findings == []"""),
    ("md", "## 4. A small chapter-4 `GPTModel`, held in memory, with a correct copy of its attention at layer 1"),
    ("code", """class Correct(MultiHeadAttention):
    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, nh, T, hs)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, nh, T, hs)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, nh, T, hs)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, nh, T, T)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))  # (b, nh, T, T)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, T, d_out)
        return self.out_proj(context_vec)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = Correct(cfg["emb_dim"], cfg["emb_dim"], cfg["context_length"], 0.0, cfg["n_heads"], cfg["qkv_bias"])
        self.ff = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), nn.GELU(approximate="tanh"),
                                nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))
        self.norm1, self.norm2 = nn.LayerNorm(cfg["emb_dim"]), nn.LayerNorm(cfg["emb_dim"])

    def forward(self, x):
        x = x + self.att(self.norm1(x))
        return x + self.ff(self.norm2(x))


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.trf_blocks = nn.Sequential(*[Block(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = nn.LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(in_idx.shape[1]))  # (b, T, emb_dim)
        return self.out_head(self.final_norm(self.trf_blocks(x)))  # (b, T, vocab_size)


torch.manual_seed(0)
cfg = {"vocab_size": 50257, "context_length": 32, "emb_dim": 16, "n_heads": 2, "n_layers": 2, "qkv_bias": True}
gpt = GPTModel(cfg)
text = {"kind": "text", "text": "Every effort moves you"}
in_model = attnlab.run(Correct, model=gpt, layer=1, inputs=text)
print(in_model, in_model.record.model.effect)

# by hand: the model with layer 1's attention swapped for a Correct built from its weights
from attnlab.model.tokens import gpt2_encoding
ids = torch.tensor([gpt2_encoding().encode(text["text"])])  # (1, T)
swapped = Correct(16, 16, 32, 0.0, 2, True)
swapped.load_state_dict(gpt.trf_blocks[1].att.state_dict())
with torch.no_grad():
    before_logits = gpt(ids)
    kept, gpt.trf_blocks[1].att = gpt.trf_blocks[1].att, swapped
    after_logits = gpt(ids)
    gpt.trf_blocks[1].att = kept
kl = torch.nn.functional.kl_div(after_logits.log_softmax(-1), before_logits.log_softmax(-1), log_target=True,
                                reduction="none").sum(-1).max().item()
print(f"KL by hand {kl:.2e}; attnlab's {in_model.record.model.effect.kl_max:.2e}")
assert kl < 1e-6 and in_model.record.model.effect.kl_max < 1e-6"""),
    ("md", "## 5. A Result shows itself"),
    ("code", "from_class"),
    ("md", "## 6. At 1,024 tokens and 12 heads: the same view, a log scale beside the linear one"),
    ("code", """long_context = attnlab.run("mha_head_merge", num_heads=12, d_out=96, inputs="random",
                           overrides=["inputs.n_tokens=1024", "inputs.d_in=32", "inputs.distribution=normal"])
long_context"""),
    ("md", "## 7. A typo is one line"),
    ("code", """try:
    attnlab.run("unscald")
except UserError as error:
    print(str(error)[:80])
    assert "did you mean 'unscaled'?" in str(error) and "\\n" not in str(error)"""),
]


def main() -> None:
    cells = [new_markdown_cell(text) if kind == "md" else new_code_cell(text) for kind, text in CELLS]
    notebook = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                  "language": "python"}})
    nbformat.write(notebook, Path(__file__).with_name("notebook.ipynb"))


if __name__ == "__main__":
    main()
