"""Per-criterion normalisation, the overlong penalty, the length-controlled reward and the judge-bias audit
(rubric_jax.rewards.shaping, judge_health, the reward terms) against hand-computed arrays."""

from types import SimpleNamespace

import numpy as np
import pytest
from ml_collections import ConfigDict

from rubric_jax.config_checks import ConfigError
from rubric_jax.methods import terms
from rubric_jax.rewards import shaping
from rubric_jax.rewards.group import advantages
from rubric_jax.rewards.judge_health import first_position_rate_flat, saturation
from rubric_jax.rl import plugins
from rubric_jax.rl.diagnostics import length_audit
from rubric_jax.rl.policy import RolloutBatch
from rubric_jax.methods.rcrl.reward import criterion_metrics, group_rewards

# one group of 6 rollouts, two criteria: the win rates of "wide" have 100 times the variance of "narrow"'s (std
# 0.31 against 0.031), and the two order the rollouts differently
WIDE = np.array([0.9, 0.1, 0.8, 0.2, 0.7, 0.3])
_K = np.array([-1.0, 1.0, -0.5, 0.5, 0.2, -0.2])
NARROW = 0.5 + 0.1 * WIDE.std() * _K / _K.std()


def _pairwise_results(x_gc):
    return [SimpleNamespace(win_rates=np.asarray(x_gc, np.float32))]


def test_per_criterion_reward_is_the_weighted_sum_of_standardised_criteria():
    x = np.stack([WIDE, NARROW], -1).astype(np.float32).astype(np.float64)  # the inputs as the f32 code sees them
    lam = np.array([0.25, 0.75])
    z = (x - x.mean(0)) / (x.std(0) + 1e-6)  # by hand: population std per criterion, GRPO's eps
    np.testing.assert_allclose(np.asarray(shaping.per_criterion_reward(x, lam)), z @ lam, rtol=1e-5, atol=1e-6)
    # a criterion flat in the group adds nothing
    flat = np.stack([WIDE, np.full(6, 0.5)], -1)
    np.testing.assert_allclose(np.asarray(shaping.per_criterion_reward(flat, lam)), 0.25 * z[:, 0], rtol=1e-5,
                               atol=1e-6)


def test_the_low_variance_criterion_moves_the_advantages_only_under_per_criterion():
    lam = np.array([0.5, 0.5])

    def adv(narrow, normalise):
        r, _ = group_rewards(_pairwise_results(np.stack([WIDE, narrow], -1)), [lam], "pairwise", normalise)
        return np.asarray(advantages(np.asarray(r)[None], kind="grpo"))[0]

    flipped = 1.0 - NARROW  # the narrow criterion's order reversed
    summed, summed_flipped = adv(NARROW, "sum"), adv(flipped, "sum")
    per, per_flipped = adv(NARROW, "per_criterion"), adv(flipped, "per_criterion")
    assert WIDE.var() / NARROW.var() == pytest.approx(100.0)
    # summed: the narrow criterion cannot change any rollout's rank, and moves no advantage by a fifth of its range
    np.testing.assert_array_equal(np.argsort(summed), np.argsort(summed_flipped))
    assert np.abs(summed - summed_flipped).max() < 0.2 * np.abs(summed).max()
    # per criterion: reversing it reorders the rollouts and moves some advantage by a third of its range or more
    assert not np.array_equal(np.argsort(per), np.argsort(per_flipped))
    assert np.abs(per - per_flipped).max() > 0.33 * np.abs(per).max()
    # its share of the advantage's movement: ~1/10 summed (the ratio of the spreads), a half per criterion
    x = np.stack([WIDE, NARROW], -1)
    share_sum = np.asarray(shaping.criterion_shares(x, lam, "sum"))
    share_per = np.asarray(shaping.criterion_shares(x, lam, "per_criterion"))
    want_sum = np.abs(x - x.mean(0)).sum(0) / np.abs(x - x.mean(0)).sum()
    np.testing.assert_allclose(share_sum, want_sum, rtol=1e-5)
    assert share_sum[1] < 0.12 and 0.45 < share_per[1] < 0.55
    z = np.abs((x - x.mean(0)) / (x.std(0) + 1e-6)).sum(0)
    np.testing.assert_allclose(share_per, z / z.sum(), rtol=1e-5)


def test_criterion_metrics_average_each_id_over_the_groups_that_judge_it():
    x1 = np.stack([WIDE, NARROW], -1)
    x2 = np.array([[1.0], [0.0]])
    m = criterion_metrics([["wide", "narrow"], ["wide"]], [x1, x2], [np.array([0.5, 0.5]), np.array([1.0])], "sum")
    s1 = np.asarray(shaping.criterion_shares(x1, [0.5, 0.5]))
    assert m["reward/criterion/wide"] == pytest.approx((WIDE.mean() + 0.5) / 2)
    assert m["adv/criterion_share/wide"] == pytest.approx((s1[0] + 1.0) / 2)
    assert m["adv/criterion_share/narrow"] == pytest.approx(s1[1])
    assert m["reward/criterion/narrow"] == pytest.approx(NARROW.mean())


def test_overlong_penalty_by_hand():
    # cap 10, buffer 4: free up to 6 tokens, then -1/4 per token, and -1 when cut at the cap
    lengths = np.array([3, 6, 7, 9, 10, 10])
    cut = np.array([False, False, False, False, False, True])
    np.testing.assert_allclose(np.asarray(shaping.overlong_penalty(lengths, cut, 10, 4)),
                               [0.0, 0.0, -0.25, -0.75, -1.0, -1.0])
    with pytest.raises(ValueError, match="buffer"):
        shaping.overlong_penalty(lengths, cut, 10, 11)


def test_length_control_removes_a_planted_length_bias():
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 400, size=(64, 8)).astype(np.float32)
    quality = rng.normal(size=(64, 8)).astype(np.float32)
    log_len = np.log(lengths)
    z = (log_len - log_len.mean(-1, keepdims=True)) / log_len.std(-1, keepdims=True)
    biased = quality + 0.8 * z  # a judge that pays for length
    corr = lambda r: np.asarray(shaping.rank_corr(r, lengths)[0]).mean()
    assert corr(biased) > 0.5
    cfg = ConfigDict(dict(reward=dict(length_control=0.8)))
    term = terms.LengthControl(cfg, None, SimpleNamespace(tokenizer=SimpleNamespace(eos_ids=[0])))
    batch = _term_batch([[5] * int(n) for n in lengths.ravel()], 8)
    controlled = biased + term.weighted(term.bonus(batch))
    np.testing.assert_allclose(controlled, quality, atol=1e-4)
    assert abs(corr(controlled) - corr(quality)) < 1e-6 and abs(corr(controlled)) < 0.1


def test_rank_corr_on_constructed_groups():
    a = np.array([[1, 2, 3, 4], [1, 2, 3, 4], [1, 1, 1, 1], [1, 2, 2, 3]], np.float32)
    b = np.array([[10, 20, 30, 40], [4, 3, 2, 1], [5, 6, 7, 8], [1, 3, 2, 4]], np.float32)
    corr, ok = (np.asarray(v) for v in shaping.rank_corr(a, b))
    np.testing.assert_array_equal(ok, [True, True, False, True])
    # last group: ranks a = (1, 2.5, 2.5, 4), b = (1, 3, 2, 4) -> Pearson of the ranks = 4.5 / sqrt(4.5 * 5)
    np.testing.assert_allclose(corr, [1.0, -1.0, 0.0, 4.5 / np.sqrt(4.5 * 5.0)], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(shaping.ranks(np.array([3.0, 1.0, 3.0, 2.0]))), [3.5, 1.0, 3.5, 2.0])


def test_length_audit_averages_the_groups_with_a_correlation():
    lengths = np.array([1, 2, 3, 4, 5, 6, 7, 8], np.float32)
    reward = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]])  # the second group is flat: left out
    assert length_audit(lengths, reward) == {"judge/length_corr": pytest.approx(1.0)}
    assert length_audit(lengths, np.full((2, 4), 0.5)) == {}


def test_first_position_rate_and_saturation_by_hand():
    p = np.array([0.9, 0.2, 0.5, 0.7, 0.6])
    valid = np.array([True, True, True, True, False])
    assert float(first_position_rate_flat(p, valid)) == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    assert float(first_position_rate_flat(p, np.zeros(5, bool))) == 0.5
    s = np.array([[4.0, 1.0], [3.6, 2.0], [2.0, 0.4]])  # criterion 0 out of 4 points, criterion 1 out of 2
    v = np.array([[True, True], [True, True], [True, False]])
    # at the top: 4.0 and 3.6 (rounds to 4) of criterion 0, 2.0 of criterion 1; 2.0/4 is not; (2, 1) invalid
    assert float(saturation(s, v, np.array([4, 2]))) == pytest.approx(3 / 5)


def _term_batch(completions, group_size):
    """A TermBatch of these completions after a one-token prompt, laid out as the trainer's rollouts."""
    width = max(len(c) for c in completions)
    comp = np.zeros((len(completions), width), np.int32)
    cmask = np.zeros((len(completions), width), bool)
    for i, c in enumerate(completions):
        comp[i, :len(c)], cmask[i, :len(c)] = c, True
    rollouts = RolloutBatch(tokens_bt=np.concatenate([np.ones((len(completions), 1), np.int32), comp], 1),
                            mask_bt=np.concatenate([np.ones((len(completions), 1), bool), cmask], 1), prompt_len=1,
                            completion_mask_bt=cmask, adv_b=np.zeros(len(completions), np.float32))
    return plugins.TermBatch(records=[], rollouts=rollouts, prompt_ids=[], completions=completions,
                           group_size=group_size)


def test_overlong_term_is_added_unstandardised_and_length_control_standardised():
    cfg = ConfigDict(dict(max_completion_len=6, reward=dict(overlong_penalty=2.0, overlong_buffer=2,
                                                            length_control=0.5)))
    ctx = SimpleNamespace(tokenizer=SimpleNamespace(eos_ids=[0]))
    # lengths 2 (ended), 5 (ended: -1/2), 6 (ended at the cap: -1), 6 (cut: -1)
    batch = _term_batch([[5, 0], [5, 5, 5, 5, 0], [5] * 5 + [0], [5] * 6], 4)
    over = terms.Overlong(cfg, None, ctx)
    np.testing.assert_allclose(over.bonus(batch), [[0.0, -0.5, -1.0, -1.0]])
    np.testing.assert_allclose(over.weighted(over.bonus(batch)), [[0.0, -1.0, -2.0, -2.0]])  # coef 2, as is
    lc = terms.LengthControl(cfg, None, ctx)
    logl = np.log([2.0, 5.0, 6.0, 6.0])
    want = -0.5 * (logl - logl.mean()) / logl.std()
    np.testing.assert_allclose(lc.weighted(lc.bonus(batch))[0], want, rtol=1e-4)
    assert {"overlong_penalty", "overlong_buffer", "length_control", "exploration_coef"} <= plugins.term_keys()
    assert [t.name for t in plugins.active_terms(cfg)] == ["overlong", "length_control"]


def test_an_overlong_buffer_past_the_cap_is_refused_before_anything_loads():
    cfg = ConfigDict(dict(max_completion_len=16, reward=dict(overlong_penalty=1.0, overlong_buffer=64)))
    with pytest.raises(ConfigError, match="overlong_buffer"):
        terms.Overlong.validate(cfg)
