"""rubric_jax.rewards_api: rubric rewards for groups of completions, checked against the judge it wraps."""

import numpy as np
import pytest

from rubric_jax.judge import Judge
from rubric_jax.rewards_api import make_judge, score_groups
from rubric_jax.rubrics import Criterion

CRITS = [Criterion(id="clear", name="Clarity", check="The response is clear."),
         Criterion(id="vivid", name="Vividness", check="The response uses vivid details.", max_points=3,
                   levels=("None.", "A few.", "Several.", "Throughout."))]
PROMPTS = ["Describe a harbour at dawn.", "Write one line about rain."]
GROUPS = [["Gulls circle the quiet boats.", "boats the quiet circle gulls", "The harbour is there."],
          ["Rain taps the tin roof.", "It rains.", "roof tin the taps rain"]]


@pytest.fixture(scope="module")
def judge(tiny_qwen3_model, qwen_tokenizer):
    return make_judge(tiny_qwen3_model, qwen_tokenizer, mode="logit")


@pytest.mark.slow
def test_pairwise_rewards_are_the_judges_win_rates_weighted(judge):
    out = score_groups(PROMPTS, GROUPS, CRITS, judge=judge)
    ref = judge.pairwise_batch(PROMPTS, GROUPS, CRITS)
    assert out.rewards.shape == (2, 3) and out.per_criterion.shape == (2, 3, 2) and out.criteria == ("clear", "vivid")
    np.testing.assert_allclose(out.per_criterion, np.stack([r.win_rates for r in ref]), atol=1e-6)
    np.testing.assert_allclose(out.rewards, out.per_criterion.mean(-1), atol=1e-6)  # equal weights
    np.testing.assert_allclose(out.rewards.mean(1), 0.5, atol=1e-6)
    only_second = score_groups(PROMPTS, GROUPS, CRITS, judge=judge, weights=[0, 2])
    np.testing.assert_allclose(only_second.rewards, out.per_criterion[..., 1], atol=1e-6)
    np.testing.assert_allclose(only_second.weights, [0.0, 1.0])


@pytest.mark.slow
def test_listwise_and_pointwise_modes(judge):
    lw = score_groups(PROMPTS, GROUPS, CRITS, judge=judge, mode="listwise")
    np.testing.assert_allclose(lw.per_criterion.mean(1), 0.5, atol=1e-6)
    assert not np.allclose(lw.per_criterion, 0.5)  # the random tiny judge still has preferences
    pw = score_groups(PROMPTS, GROUPS, CRITS, judge=judge, mode="pointwise")
    ref = judge.pointwise_batch(PROMPTS, GROUPS, CRITS)
    want = np.stack([r.scores / np.asarray([1.0, 3.0]) for r in ref])
    np.testing.assert_allclose(pw.per_criterion, want, atol=1e-6)
    np.testing.assert_allclose(pw.rewards, want.mean(-1), atol=1e-6)
    assert ((pw.rewards >= 0) & (pw.rewards <= 1)).all()


@pytest.mark.parametrize("call, match", [
    (lambda j: score_groups(PROMPTS, GROUPS[:1], CRITS, judge=j), "2 prompts but 1 groups"),
    (lambda j: score_groups(PROMPTS, [GROUPS[0], GROUPS[1][:2]], CRITS, judge=j), "same number"),
    (lambda j: score_groups(PROMPTS, GROUPS, CRITS, judge=j, mode="ranked"), "mode must be"),
    (lambda j: score_groups(PROMPTS, GROUPS, CRITS, judge=j, weights=[1.0]), "weights"),
    (lambda j: score_groups(PROMPTS, GROUPS, CRITS, judge=j, weights=[1.0, float("nan")]), "weights"),
    (lambda j: score_groups(PROMPTS, GROUPS, [], judge=j), "rubric"),
    (lambda j: score_groups([], [], CRITS, judge=j), "no prompts"),
])
def test_bad_calls_name_the_problem(judge, call, match):
    with pytest.raises(ValueError, match=match):
        call(judge)


def test_make_judge_needs_a_tokenizer_for_a_loaded_model(tiny_qwen3_model, qwen_tokenizer):
    with pytest.raises(ValueError, match="tokenizer"):
        make_judge(tiny_qwen3_model)
    j = make_judge(tiny_qwen3_model, qwen_tokenizer, pairing="circular", max_response_tokens=64)
    assert isinstance(j, Judge) and j.config.pairing == "circular" and j.config.prompt.max_response_tokens == 64
