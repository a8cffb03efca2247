"""A class training cannot build is refused in one line that names what was filled, what is
missing and the constructors that train; never the book's mistakes as replacements."""

from dataclasses import dataclass

import pytest
from torch import nn

from attnlab import train
from attnlab.errors import UserError
from tests.training._tiny import TINY_OVERRIDES


@dataclass
class WidthConfig:
    """A config with the sizes and no context length."""

    n_embd: int = 16
    n_head: int = 2


class ConfigBuilt(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        return self.proj(x)


class TwoD(nn.Module):
    """SelfAttention_v1-like: (d_in, d_out), no mask."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out)

    def forward(self, x):
        return self.W_query(x)


@pytest.mark.parametrize("cls,given", [(ConfigBuilt, "ConfigBuilt(config: WidthConfig, filled as 16, 16, num_heads=2)"), (TwoD, "TwoD(16, 16)")])
def test_a_class_without_a_context_length_is_refused_naming_what_fits(cls, given):
    with pytest.raises(UserError) as caught:
        train(cls, "induction", overrides=TINY_OVERRIDES)
    message = str(caught.value)
    assert given in message and "no context length" in message and "\n" not in message
    assert "Cls(d_in, d_out, context_length, dropout, num_heads)" in message and "Cls(config)" in message
    assert not any(mistake in message for mistake in ("unscaled", "wrong_softmax_axis", "causal_mask_missing"))
