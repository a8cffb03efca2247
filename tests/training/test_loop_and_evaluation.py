"""Training for real on a tiny size: the loss goes down; a leaking mask looks good teacher-forced
and fails when each prefix is evaluated on its own."""

import torch

from attnlab.training.counterparts import counterpart
from attnlab.training.evaluation import causal, evaluate, teacher_forced
from attnlab.training.loop import train
from attnlab.training.start import build
from attnlab.training.tasks import make_task
from tests.training._tiny import tiny


def _trained(variant: str, steps: int = 60, **changes):
    settings = tiny(steps=steps, **changes)
    task = make_task(settings)
    torch.manual_seed(0)
    model = build(counterpart(variant, 16, 8, 2), task.vocab, settings)
    losses = train(model, task, settings, seed=0)
    return model, task, losses


def test_the_loss_goes_down():
    _, _, losses = _trained("reference")
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_causal_evaluation_equals_teacher_forced_for_a_causal_model():
    model, task, _ = _trained("reference", steps=5)
    batch = task.batch(16, torch.Generator().manual_seed(1), "eval")
    model.eval()
    for (tf_loss, tf_acc), (c_loss, c_acc) in [(teacher_forced(model, batch), causal(model, batch))]:
        assert abs(tf_loss - c_loss) < 1e-5 and tf_acc == c_acc


def test_a_leaking_mask_trains_well_teacher_forced_and_fails_causally(tmp_path):
    """Random characters: nothing to learn but the next token itself, which only a leak shows."""
    text = tmp_path / "noise.txt"
    text.write_text("".join("abcdefgh"[i] for i in torch.randint(0, 8, (3000,), generator=torch.Generator().manual_seed(0))))
    model, task, _ = _trained("causal_mask_missing", steps=80, task="text", path=str(text))
    scores = evaluate(model, task.batch(32, torch.Generator().manual_seed(1), "eval"))
    assert scores["teacher_forced_accuracy"] > 0.6
    assert scores["causal_accuracy"] < 0.3  # chance is 1/8


def test_the_last_logits_are_the_forward_s_last_position():
    model, task, _ = _trained("causal_mask_missing", steps=3)
    inputs = task.batch(4, torch.Generator().manual_seed(2), "eval").inputs
    with torch.no_grad():
        assert torch.allclose(model.last_logits(inputs[:, :5]), model(inputs[:, :5])[:, -1], atol=1e-5)
