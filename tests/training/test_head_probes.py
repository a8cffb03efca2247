"""Per-head measures at every evaluation: the induction score against hand computations on
constructed attention patterns, and what a job records at each evaluation."""

import pytest
import torch

from attnlab import train
from attnlab.training.head_probes import (
    INDUCTION_THRESHOLD,
    formation_sentence,
    induction_formed,
    induction_score,
    repeated_segments,
)
from tests.training._tiny import TINY_OVERRIDES

T, SEGMENT = 8, 5  # the tiny induction task: a segment of 5 distinct tokens, then its first 3 again


def causal_uniform(heads: int = 1) -> torch.Tensor:
    rows = [[1 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)]
    return torch.tensor(rows).expand(2, heads, T, T)  # (B, H, T, T)


def test_a_perfect_induction_head_scores_one():
    weights = causal_uniform().clone()
    for i in range(SEGMENT, T):  # the token after the earlier occurrence of token i: position i - SEGMENT + 1
        weights[:, :, i] = 0.0
        weights[:, :, i, i - SEGMENT + 1] = 1.0
    assert induction_score(weights, SEGMENT) == pytest.approx([1.0])


def test_a_uniform_head_scores_the_mean_of_one_over_its_row_length():
    by_hand = (1 / 6 + 1 / 7 + 1 / 8) / 3  # rows 5, 6, 7 spread over 6, 7, 8 keys
    assert induction_score(causal_uniform(), SEGMENT) == pytest.approx([by_hand])


def test_a_previous_token_head_scores_zero_and_heads_are_scored_apart():
    previous = torch.zeros(2, 1, T, T)
    for i in range(T):
        previous[:, :, i, max(i - 1, 0)] = 1.0
    both = torch.cat([previous, causal_uniform()], dim=1)  # (2, 2, T, T)
    assert induction_score(both, SEGMENT) == pytest.approx([0.0, (1 / 6 + 1 / 7 + 1 / 8) / 3])


def test_repeated_segments_repeat_at_the_segment_length():
    tokens = repeated_segments(vocab=50, context_length=T, size=3)
    assert tokens.shape == (3, T)
    assert torch.equal(tokens[:, SEGMENT:], tokens[:, :T - SEGMENT])


def test_heads_formed_at_the_first_evaluation_above_the_threshold():
    heads = [{"step": 0, "induction_max": 0.1}, {"step": 20, "induction_max": INDUCTION_THRESHOLD},
             {"step": 40, "induction_max": 0.9}]
    assert induction_formed(heads) == 40
    assert induction_formed(heads[:2]) is None


def test_the_sentence_names_each_seeds_step_and_never():
    def side(step):
        return {"induction_formed": float(step is not None), "steps_to_induction": 60.0 if step is None else step}
    summaries = [{"reference": side(20.0), "variant": side(None)}, {"reference": side(40.0), "variant": side(None)}]
    assert formation_sentence("unscaled", summaries, 40) == (
        "induction heads (some head's induction score above 0.4): the reference's formed at steps 20, 40; "
        "unscaled's never formed in 40 steps")
    summaries[1]["variant"] = side(40.0)
    assert formation_sentence("unscaled", summaries, 40).endswith("unscaled's formed at steps never, 40")
    for summary in summaries:  # a variant whose weights cannot be read: its heads are not measured
        summary["variant"] = {}
    assert formation_sentence("linear_attention", summaries, 40).endswith("linear_attention's not measured "
                                                                          "(its attention weights are not one row per query over the keys)")


def test_the_table_says_never_where_no_seeds_heads_formed():
    from attnlab.training.verdict import rows

    never = {"induction_formed": 0.0, "steps_to_induction": 60.0}
    summaries = [{"reference": {"induction_formed": 1.0, "steps_to_induction": 20.0}, "variant": never}] * 2
    row = next(row.as_dict() for row in rows(summaries) if row.measure == "steps_to_induction")
    assert (row["reference"], row["variant"]) == ("20±0", "never")


def test_every_evaluation_records_every_layers_heads(tmp_path):
    result = train("unscaled", "mqar", overrides=[*TINY_OVERRIDES, "training.pairs=2", "log.tensorboard=false"])
    heads = result.seeds[0]["reference"]["heads"]
    assert [point["step"] for point in heads] == [e["step"] for e in result.seeds[0]["reference"]["evals"]] == [0, 20, 40]
    expected = {f"layer0/head{h}/{what}" for h in (0, 1) for what in ("max_weight", "entropy", "induction")}
    assert expected | {"step", "induction_max"} == set(heads[0])
    assert all(0 <= point[f"layer0/head{h}/induction"] <= 1 for point in heads for h in (0, 1))
    assert "steps_to_induction" in [row.measure for row in result.rows]
    assert "head_weights" not in result.as_dict()["seeds"][0]["reference"]


def test_head_probes_can_be_switched_off():
    result = train("unscaled", "induction", overrides=[*TINY_OVERRIDES, "training.head_probes=false", "log.tensorboard=false"])
    assert "heads" not in result.seeds[0]["variant"]
    assert not any("induction heads" in sentence for sentence in result.verdict)
