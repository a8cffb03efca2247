"""torch's functional multi-head attention recorded from its own arguments: a per-head float mask
(b * num_heads, T, T), as WavLM passes its gated relative position bias, is each batch item's."""

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.capture.recorder import capture


class _PerHeadBias(nn.Module):
    """F.multi_head_attention_forward on (T, b, d) with a (b * heads, T, T) additive mask."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2)
        self.bias = nn.Parameter(torch.randn(2 * 2, 5, 5, generator=torch.Generator().manual_seed(1)))

    def forward(self, x):
        seq = x.transpose(0, 1)  # (T, b, d)
        out, _ = F.multi_head_attention_forward(seq, seq, seq, 16, 2, self.attn.in_proj_weight, self.attn.in_proj_bias,
                                                None, None, False, 0.0, self.attn.out_proj.weight,
                                                self.attn.out_proj.bias, training=False, attn_mask=self.bias)
        return out.transpose(0, 1)  # (b, T, d)


def test_a_per_head_mask_is_recorded_on_each_batch_items_heads():
    torch.manual_seed(0)
    module = _PerHeadBias().eval()
    x = torch.rand(2, 5, 16, generator=torch.Generator().manual_seed(0))
    q, k, _ = F.linear(x, module.attn.in_proj_weight, module.attn.in_proj_bias).chunk(3, dim=-1)
    q, k = (t.view(2, 5, 2, 8).transpose(1, 2) for t in (q, k))  # (b, heads, T, hs)
    expected = torch.softmax(q @ k.mT / 8 ** 0.5 + module.bias.view(2, 2, 5, 5), dim=-1)  # (b, heads, T, T)
    torch.testing.assert_close(capture(module, x).stages["weights"], expected.detach())
