"""capture() of attention whose keys are chosen by an indexer's top-k (DeepSeek-V3.2's DSA, written
here in plain torch): the indexer's product is set apart, the attention's own head is captured, and
the keys each query keeps are the top-k computed independently."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.capture.recorder import capture


class Indexer(nn.Module):
    """ReLU(q_i · k_j) of projections of its own: a score per (query, key), never a softmax."""

    def __init__(self, d_in):
        super().__init__()
        self.wq_b = nn.Linear(d_in, 8, bias=False)
        self.wk = nn.Linear(d_in, 8, bias=False)

    def forward(self, x):  # (b, t, d_in)
        return F.relu(self.wq_b(x) @ self.wk(x).transpose(1, 2))  # (b, t, t)


class SparseKeysAttention(nn.Module):
    """Causal multi-head attention over each query's top_k keys by the indexer (`wrong`: over the others)."""

    def __init__(self, d_in, d_out, num_heads, top_k, wrong=False):
        super().__init__()
        self.h, self.dh, self.top_k, self.wrong = num_heads, d_out // num_heads, top_k, wrong
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)
        self.indexer = Indexer(d_in)

    def forward(self, x):
        b, t, _ = x.shape
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        index_scores = self.indexer(x).masked_fill(future, -torch.inf)  # (b, t, t)
        top = index_scores.topk(min(self.top_k, t), dim=-1).indices  # (b, t, top_k)
        dropped = torch.ones(b, t, t, dtype=torch.bool).scatter(-1, top, False)
        q, k, v = (w(x).view(b, t, self.h, self.dh).transpose(1, 2) for w in (self.W_query, self.W_key, self.W_value))
        attn_scores = q @ k.transpose(2, 3)  # (b, h, t, t)
        masked = attn_scores.masked_fill((future | (~dropped if self.wrong else dropped))[:, None], -torch.inf)
        attn_weights = torch.softmax(masked / math.sqrt(self.dh), dim=-1)
        context_vec = (attn_weights @ v).transpose(1, 2).reshape(b, t, -1)  # (b, t, d_out)
        return self.out_proj(context_vec)


def test_the_indexer_is_a_key_selection_and_the_head_is_the_attention():
    torch.manual_seed(0)
    module, x = SparseKeysAttention(16, 16, 2, top_k=3).eval(), torch.randn(2, 6, 16)
    c = capture(module, x)
    with torch.no_grad():  # the head's scores and the indexer's choice, computed here
        q = (x @ module.W_query.weight.T).view(2, 6, 2, 8).transpose(1, 2)
        k = (x @ module.W_key.weight.T).view(2, 6, 2, 8).transpose(1, 2)
        index = F.relu((x @ module.indexer.wq_b.weight.T) @ (x @ module.indexer.wk.weight.T).transpose(1, 2))
        index = index.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), -torch.inf)
    kept = torch.zeros(2, 6, 6, dtype=torch.bool).scatter(-1, index.topk(3, dim=-1).indices, True)
    assert not c.missing
    torch.testing.assert_close(c.stages["scores"], q @ k.transpose(2, 3))
    assert c.key_selection == (3, 6)
    assert torch.equal(c.selected_keys, kept[:, None])
    hidden = torch.isneginf(c.stages["scaled_scores"])  # (b, h, t, t): the future and the dropped keys
    assert torch.equal(hidden, (~kept | torch.ones(6, 6, dtype=torch.bool).triu(1))[:, None].expand(2, 2, 6, 6))


class OnlyASelection(nn.Module):
    """A top-k of the one score product and no softmax: nothing else to be the attention."""

    def __init__(self):
        super().__init__()
        self.W_query, self.W_key = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)

    def forward(self, x):
        attn_scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)  # (b, t, t)
        return attn_scores.topk(2, dim=-1).values  # (b, t, 2)


def test_a_selection_with_nothing_else_stays_the_scores():
    torch.manual_seed(0)
    module, x = OnlyASelection(), torch.randn(1, 4, 8)
    c = capture(module, x)
    with torch.no_grad():
        expected = (x @ module.W_query.weight.T) @ (x @ module.W_key.weight.T).transpose(1, 2)
    torch.testing.assert_close(c.stages["scores"], expected[:, None])
    assert c.key_selection is None
