"""The small owning model a Hugging Face attention's call is recorded from (attnlab.modules.hf_small):
shrunk only where its config stays consistent. Expected values come from the model's own forward:
a hook on its attention layer keeps what the layer was given and what it returned."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from attnlab.modules import hf_small  # noqa: E402
from attnlab.modules.built import HUGGING_FACE_CALL  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402
from tests.modules.hf_runs import assert_runs_clean  # noqa: E402


def test_a_vocabulary_the_config_leaves_unset_is_the_small_one_and_the_class_gets_its_models_call():
    """ESM's config leaves vocab_size to a checkpoint (None: its model cannot be built); the
    recording model takes the small vocabulary, and attnlab's module, fed that model's call,
    returns what the same layer returns inside EsmModel's own forward."""
    from transformers.models.esm.modeling_esm import EsmModel

    module = hf_constructor("hf:esm")(64, 64, 4).eval()
    assert module.config.vocab_size is None
    assert hf_small.shrunk(module.config, 0, 2).vocab_size == hf_small.VOCAB
    config = copy.deepcopy(module.config)
    config.vocab_size, config.num_hidden_layers, config._attn_implementation = 33, 1, "eager"
    model = EsmModel(config, add_pooling_layer=False).eval()
    layer = next(m for m in model.modules() if type(m) is type(module))
    layer.load_state_dict(module.state_dict())
    seen: dict[str, torch.Tensor] = {}

    def hook(_m: torch.nn.Module, args: tuple, kwargs: dict, out: tuple) -> None:
        seen["hidden"], seen["output"] = (args[0] if args else kwargs["hidden_states"]), out[0]

    layer.register_forward_hook(hook, with_kwargs=True)
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    with torch.no_grad():
        model(inputs_embeds=x)
        got = HUGGING_FACE_CALL.call(module, seen["hidden"]).output  # (b, num_tokens, d_out)
    torch.testing.assert_close(got, seen["output"], rtol=1e-5, atol=1e-6)


def test_a_depth_a_per_layer_list_ties_keeps_its_own_value():
    """SEW-D's num_feat_extract_layers is its conv_dim's length (13): cut to 1 beside 13 widths, its
    model's feature norm (conv_dim[-1] = 512 wide) met 64 features. Kept, the model runs."""
    from transformers.models.sew_d.modeling_sew_d import SEWDModel

    module = hf_constructor("hf:sew-d")(64, 64, 4)
    small = hf_small.shrunk(module.config, 0, 2)
    assert small.num_feat_extract_layers == len(small.conv_dim) == 13
    assert small.num_hidden_layers == 1
    model = SEWDModel(small).eval()
    with torch.no_grad():
        out = model(input_values=torch.randn(1, 1600)).last_hidden_state
    assert out.shape[-1] == 64 and torch.isfinite(out).all()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["esm", "sew-d"])
def test_a_class_whose_model_is_built_consistently_runs_with_no_error_finding(model):
    assert_runs_clean(model, None)
