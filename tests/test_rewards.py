"""Reward functions: pairwise, pointwise / RARE, RARE statistics, RLMR, bonuses, judge health.

Every expected value is worked out by hand in the comments next to it.
"""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubric_jax.rewards import (
    absolute_reward,
    add_bonuses,
    all_pairs_mask,
    circular_pairs_mask,
    criterion_stats,
    curriculum_weights,
    exploration_bonus,
    first_win_probs,
    flip_labels,
    hard_verdicts,
    sign_verdicts,
    invalid_fraction,
    linear_mix,
    mask_from_pairs,
    mean_pool,
    normalised_scores,
    order_agreement,
    pairs_from_mask,
    pairwise_reward,
    position_bias,
    position_bias_flat,
    random_projection,
    rare_reward,
    replacement_budget,
    replacement_stats,
    rlmr_delta,
    rlmr_penalty,
    saturated_criteria,
    set_stats,
    switch_bound,
    symmetrize,
    usefulness_bonus,
    verdict_entropy,
    verifier_precision_recall,
    win_rates,
)

# Hand checks run the jitted functions: every function is compiled at least once, and one jit
# compile is much cheaper than dispatching many small ops eagerly on CPU.
_STATIC = {
    "random_projection": ("d_in", "d_out"),
    "curriculum_weights": ("num_criteria", "interval", "mode"),
}
for _name in [n for n in dir() if not n.startswith("_")]:
    _f = globals()[_name]
    if callable(_f) and getattr(_f, "__module__", "").startswith("rubric_jax.rewards") and _name not in (
        "all_pairs_mask", "circular_pairs_mask", "mask_from_pairs", "pairs_from_mask"
    ):
        globals()[_name] = jax.jit(_f, static_argnames=_STATIC.get(_name, ()))

# p_first[a, b] = P(first wins | a shown first, b second); diagonal is junk and must be ignored.
P_FIRST = np.array(
    [
        [0.99, 0.8, 0.6],
        [0.4, 0.99, 0.7],
        [0.2, 0.9, 0.99],
    ],
    dtype=np.float32,
)
# p(0>1) = (0.8 + 1 - 0.4) / 2 = 0.7   p(0>2) = (0.6 + 1 - 0.2) / 2 = 0.7   p(1>2) = (0.7 + 1 - 0.9) / 2 = 0.4
P_SYM = np.array([[0.5, 0.7, 0.7], [0.3, 0.5, 0.4], [0.3, 0.6, 0.5]], dtype=np.float32)


# ---- pairwise ---------------------------------------------------------------------------------


def test_symmetrize_hand():
    p = np.asarray(symmetrize(P_FIRST))
    np.testing.assert_allclose(p, P_SYM, atol=1e-6)
    assert np.all(p + p.T == 1.0)
    # with a criterion axis: criterion 1 is the transpose case
    p3 = np.asarray(symmetrize(np.stack([P_FIRST, P_FIRST.T], -1)))
    np.testing.assert_allclose(p3[..., 0], P_SYM, atol=1e-6)
    # P_FIRST.T: p(0>1) = (0.4 + 1 - 0.8)/2 = 0.3, p(0>2) = (0.2 + 1 - 0.6)/2 = 0.3, p(1>2) = (0.9 + 1 - 0.7)/2 = 0.6
    np.testing.assert_allclose(p3[..., 1], P_SYM.T, atol=1e-6)


def test_first_win_probs_hand():
    logits = np.array([[2.0, 0.0], [0.0, 0.0], [-1.0, 3.0]], np.float32)
    np.testing.assert_allclose(first_win_probs(logits), [1 / (1 + np.exp(-2)), 0.5, 1 / (1 + np.exp(4))], rtol=1e-6)


def test_win_rates_all_pairs_hand():
    # w0 = (0.7 + 0.7)/2, w1 = (0.3 + 0.4)/2, w2 = (0.3 + 0.6)/2
    w = win_rates(P_SYM[..., None])
    np.testing.assert_allclose(w, [[0.7], [0.35], [0.45]], atol=1e-6)
    np.testing.assert_allclose(win_rates(P_SYM), [0.7, 0.35, 0.45], atol=1e-6)


def test_win_rates_pair_mask_hand():
    # judged: (0,1) and (1,2) (given one-sided; the mask is symmetrised)
    mask = np.zeros((3, 3), bool)
    mask[0, 1] = mask[2, 1] = True
    # w0 = p(0>1) = 0.7, w1 = (0.3 + 0.4)/2, w2 = p(2>1) = 0.6
    np.testing.assert_allclose(win_rates(P_SYM, mask), [0.7, 0.35, 0.6], atol=1e-6)
    # only (0,1) judged: rollout 2 has no opponent -> 0.5
    mask = np.zeros((3, 3), bool)
    mask[1, 0] = True
    np.testing.assert_allclose(win_rates(P_SYM, mask), [0.7, 0.3, 0.5], atol=1e-6)
    # per-criterion mask (G, G, C): criterion 0 all pairs, criterion 1 none
    m3 = np.stack([all_pairs_mask(3), np.zeros((3, 3), bool)], -1)
    w = win_rates(np.stack([P_SYM, P_SYM], -1), m3)
    np.testing.assert_allclose(w, [[0.7, 0.5], [0.35, 0.5], [0.45, 0.5]], atol=1e-6)
    # G = 1
    np.testing.assert_allclose(win_rates(np.full((1, 1, 2), 0.5)), [[0.5, 0.5]])


def test_hard_verdicts_hand():
    scores = np.stack([P_FIRST, 1 - P_FIRST], -1)
    # (0,1): 0 wins in both orders -> 1; (0,2): both orders -> 1; (1,2): each order prefers the
    # first slot (0.7 and 0.9), the orders disagree -> 0.5
    want = np.array([[0.5, 1.0, 1.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]])
    np.testing.assert_array_equal(hard_verdicts(scores), want)
    np.testing.assert_allclose(win_rates(hard_verdicts(scores)), [1.0, 0.25, 0.25])
    # an exact tie in one order counts half: 0 ties first, and loses as second -> (0.5 + 0)/2
    tie = np.array([[[0, 0], [1.0, 1.0]], [[2.0, 0.0], [0, 0]]], np.float32)
    np.testing.assert_array_equal(hard_verdicts(tie), [[0.5, 0.25], [0.75, 0.5]])


def test_sign_verdicts_hand():
    # P_FIRST's pair (1,2): each order names the first slot (0.7, 0.9), which hard mode ties; the average
    # p(1 > 2) = (0.7 + 1 - 0.9) / 2 = 0.4 < 1/2, so sign mode gives the pair to 2
    want = np.array([[0.5, 1.0, 1.0], [0.0, 0.5, 0.0], [0.0, 1.0, 0.5]])
    np.testing.assert_array_equal(sign_verdicts(P_FIRST), want)
    np.testing.assert_allclose(win_rates(sign_verdicts(P_FIRST)), [1.0, 0.0, 0.5])
    # the same comparison as the logit mode's with 1/2, and an exact 1/2 stays a tie
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(5, 5, 2)).astype(np.float32)
    p[0, 1, 0], p[1, 0, 0] = 0.8, 0.2  # symmetrised p(0 > 1) = (0.8 + 1 - 0.2) / 2 = 0.8
    p[2, 3, 1], p[3, 2, 1] = 0.6, 0.4  # (0.6 + 0.6) / 2 = 0.6
    p[0, 4, 0] = p[4, 0, 0] = 0.3  # (0.3 + 0.7) / 2 = 1/2: a tie
    sym, sg = np.asarray(symmetrize(p)), np.asarray(sign_verdicts(p))
    off = ~np.eye(5, dtype=bool)
    assert sg[0, 4, 0] == sg[4, 0, 0] == 0.5
    np.testing.assert_array_equal(sg[off], np.where(sym > 0.5, 1.0, np.where(sym < 0.5, 0.0, 0.5))[off])
    np.testing.assert_array_equal(sg + np.swapaxes(sg, 0, 1), np.ones_like(sg))


def test_pairwise_reward_hand():
    w = np.array([[0.7, 0.2], [0.35, 0.6], [0.45, 0.7]], np.float32)
    lam = np.array([0.25, 0.75], np.float32)
    # 0.25*0.7 + 0.75*0.2, 0.25*0.35 + 0.75*0.6, 0.25*0.45 + 0.75*0.7
    np.testing.assert_allclose(pairwise_reward(w, lam), [0.325, 0.5375, 0.6375], rtol=1e-6)


def test_pair_schedules_hand():
    np.testing.assert_array_equal(
        circular_pairs_mask(4),
        [[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]],
    )
    np.testing.assert_array_equal(pairs_from_mask(circular_pairs_mask(4)), [[0, 1], [0, 3], [1, 2], [2, 3]])
    assert circular_pairs_mask(5, 2).sum() == 20  # k = 2 on 5 nodes covers every pair
    np.testing.assert_array_equal(mask_from_pairs([[0, 2]], 3), [[0, 0, 1], [0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(all_pairs_mask(2), [[False, True], [True, False]])


def _random_complementary(g, c, rng):
    """Any p with p + p^T = 1 (upper triangle free, including the extremes 0 and 1)."""
    u = rng.uniform(size=(g, g, c))
    u = np.where(rng.uniform(size=u.shape) < 0.15, np.round(u), u).astype(np.float32)
    upper = np.triu(np.ones((g, g), bool), 1)[..., None]
    p = np.where(upper, u, 0.0)
    p = p + np.where(upper, 1.0 - u, 0.0).transpose(1, 0, 2)
    p[np.arange(g), np.arange(g)] = 0.5
    return p


@jax.jit
def _mean_win_rates(p_ggc, mask_gg, pf_ggc):
    ps = symmetrize(pf_ggc)
    return win_rates(p_ggc, mask_gg).mean(axis=0), ps, win_rates(ps).mean(axis=0)


@settings(max_examples=50, deadline=None)
@given(g=st.sampled_from([2, 3, 5, 8]), seed=st.integers(0, 2**31 - 1), ring=st.booleans())
def test_win_rates_group_mean_is_half(g, seed, ring):
    c = 2
    rng = np.random.default_rng(seed)
    p = _random_complementary(g, c, rng)
    # all pairs, or a regular (circular) pairing: both keep the group mean at exactly 1/2
    mask = circular_pairs_mask(g, 1) if ring else all_pairs_mask(g)
    # symmetrising an arbitrary first-position matrix gives such a p as well
    pf = rng.uniform(size=(g, g, c)).astype(np.float32)
    mean_w, ps, mean_ws = map(np.asarray, _mean_win_rates(p, mask, pf))
    np.testing.assert_allclose(mean_w, 0.5, atol=1e-6)
    assert np.all(ps + ps.transpose(1, 0, 2) == 1.0)
    np.testing.assert_allclose(mean_ws, 0.5, atol=1e-6)


@jax.jit
def _hard_reward(scores_ggc2, lam_c):
    return pairwise_reward(win_rates(hard_verdicts(scores_ggc2)), lam_c)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    a=st.floats(0.1, 5.0),
    b=st.floats(0.0, 2.0),
    c=st.floats(0.0, 3.0),
    shift=st.floats(-10.0, 10.0),
)
def test_hard_mode_invariant_to_monotone_transform(seed, a, b, c, shift):
    rng = np.random.default_rng(seed)
    g, n_c = 4, 3
    # judge logits on a coarse grid: distinct values stay distinct after the map, ties stay ties
    logits = (rng.integers(-6, 7, size=(g, g, n_c, 2)) / 2.0).astype(np.float32)
    lam = np.asarray(curriculum_weights(int(rng.integers(0, 400)), n_c, 100, 0.5))

    def f(x):  # strictly increasing: a x + b x^3 + c tanh(x) + shift, with a > 0, b, c >= 0
        return a * x + b * x**3 + c * np.tanh(x) + shift

    base = np.asarray(_hard_reward(logits, lam))
    np.testing.assert_array_equal(np.asarray(_hard_reward(f(logits).astype(np.float32), lam)), base)
    # the same verdicts read from first-position probabilities instead of logits
    p = np.asarray(first_win_probs(logits))
    np.testing.assert_array_equal(np.asarray(_hard_reward(np.stack([p, 1 - p], -1), lam)), base)


# ---- pointwise / RARE ---------------------------------------------------------------------------

S = np.array([[4, 2, 1], [0, 2, 3], [1, 1, 1]], np.float32)
MAX = np.array([4, 2, 3], np.float32)
VALID = np.array([[True, True, True], [True, True, False], [False, False, False]])


def test_normalised_scores_hand():
    np.testing.assert_allclose(normalised_scores(S[:2], MAX), [[1, 1, 1 / 3], [0, 1, 1]], rtol=1e-6)


def test_absolute_reward_hand():
    lam = np.array([0.5, 0.25, 0.25], np.float32)
    # row 0: 0.5*1 + 0.25*1 + 0.25/3 = 0.833333
    # row 1: criterion 2 invalid -> weights renormalised over 0.5 + 0.25: (0.5*0 + 0.25*1)/0.75 = 1/3
    # row 2: nothing valid -> mean of the other rollouts, (0.833333 + 0.333333)/2
    want = [0.5 + 0.25 + 0.25 / 3, 1 / 3, (0.5 + 0.25 + 0.25 / 3 + 1 / 3) / 2]
    np.testing.assert_allclose(absolute_reward(S, MAX, lam, VALID), want, rtol=1e-6)
    # all valid, equal weights (Absolute RaR): (1 + 1 + 1/3)/3, (0 + 1 + 1)/3, (1/4 + 1/2 + 1/3)/3
    np.testing.assert_allclose(
        absolute_reward(S, MAX, np.full(3, 1 / 3, np.float32)),
        [7 / 9, 2 / 3, (0.25 + 0.5 + 1 / 3) / 3],
        rtol=1e-6,
    )
    # an out-of-range score counts as invalid: 5 > max 4
    s_bad = np.array([[5, 2, 3]], np.float32)
    np.testing.assert_allclose(absolute_reward(s_bad, MAX, lam), [1.0], rtol=1e-6)
    # a group where nothing is valid -> zeros
    np.testing.assert_array_equal(absolute_reward(S, MAX, lam, np.zeros_like(VALID)), [0, 0, 0])
    # inactive criteria do not matter even when invalid
    lam0 = np.array([1.0, 0.0, 0.0], np.float32)
    np.testing.assert_allclose(absolute_reward(S[:2], MAX, lam0, VALID[:2]), [1.0, 0.0])


def test_rare_reward_hand():
    r, flagged = rare_reward(S, MAX, VALID)
    # (4+2+1)/9, (0+2+[invalid 3 -> 0])/9, nothing valid -> 0
    np.testing.assert_allclose(r, [7 / 9, 2 / 9, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(flagged, [False, True, True])
    r, flagged = rare_reward(S, MAX)
    np.testing.assert_allclose(r, [7 / 9, 5 / 9, 3 / 9], rtol=1e-6)
    assert not np.asarray(flagged).any()


def test_saturated_criteria_hand():
    s = np.array([[4, 2, 0], [4, 2, 0], [4, 1, 0]], np.float32)
    # c0 all at max -> eligible; c1 one rollout below max; c2 uniformly LOW -> not eligible
    np.testing.assert_array_equal(saturated_criteria(s, None, MAX), [True, False, False])
    valid = np.ones((3, 3), bool)
    valid[1, 0] = False  # one invalid score at max still blocks eligibility
    np.testing.assert_array_equal(saturated_criteria(s, valid, MAX), [False, False, False])
    s2 = np.array([[4, 2, 3], [4, 2, 3]], np.float32)
    np.testing.assert_array_equal(saturated_criteria(s2, np.ones((2, 3), bool), MAX), [True, True, True])


def test_replacement_budget_and_bound_hand():
    assert int(replacement_budget(np.array([True, True, True, True, False]))) == 3
    assert int(replacement_budget(np.array([True, False]))) == 1
    assert int(replacement_budget(np.array([False, False]))) == 0
    assert int(replacement_budget(np.ones(6, bool), budget=5)) == 5
    # (4 + 3) / (4 + 2 + 3)
    np.testing.assert_allclose(switch_bound(MAX, np.array([True, False, True])), 7 / 9, rtol=1e-6)


S_EVT = np.array([[4, 4], [4, 4], [2, 4], [2, 4]], np.float32)  # criterion 1 saturated
MAX_EVT = np.array([4, 4], np.float32)


def test_criterion_stats_hand():
    st_ = criterion_stats(S_EVT, MAX_EVT)
    # criterion 0: x = [1, 1, .5, .5], mu = .75, var = .0625, |z| = .25 / (.25 + 1e-6)
    np.testing.assert_allclose(st_["mean"], [0.75, 1.0], rtol=1e-6)
    np.testing.assert_allclose(st_["headroom"], [0.25, 0.0], atol=1e-7)
    np.testing.assert_allclose(st_["variance"], [0.0625, 0.0], atol=1e-7)
    np.testing.assert_allclose(st_["mean_abs_z"], [0.25 / (0.25 + 1e-6), 0.0], rtol=1e-6)
    np.testing.assert_array_equal(st_["has_headroom"], [True, False])
    np.testing.assert_array_equal(st_["has_variance"], [True, False])


def test_set_stats_hand():
    both = set_stats(S_EVT, MAX_EVT)
    np.testing.assert_allclose(both["headroom"], 0.125, rtol=1e-6)
    np.testing.assert_allclose(both["variance"], 0.03125, rtol=1e-6)
    np.testing.assert_allclose(both["mean_abs_z"], 0.5 * 0.25 / (0.25 + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(both["headroom_rate"], 0.5)
    assert int(both["num_criteria"]) == 2
    only1 = set_stats(S_EVT, MAX_EVT, np.array([False, True]))
    assert float(only1["headroom"]) == 0.0 and float(only1["headroom_rate"]) == 0.0
    empty = set_stats(S_EVT, MAX_EVT, np.array([False, False]))
    assert int(empty["num_criteria"]) == 0 and float(empty["headroom"]) == 0.0


def test_replacement_stats_hand():
    out = replacement_stats(S_EVT, MAX_EVT, np.array([True, True]))
    # y = [8, 8, 6, 6] / 8 = [1, 1, .75, .75]; mu = .875; var = .015625; |A| = .125 / (.125 + 1e-6)
    np.testing.assert_allclose(out["score"], 0.875, rtol=1e-6)
    np.testing.assert_allclose(out["headroom"], 0.125, rtol=1e-6)
    np.testing.assert_allclose(out["variance"], 0.015625, rtol=1e-6)
    np.testing.assert_allclose(out["mean_abs_adv"], 0.125 / (0.125 + 1e-6), rtol=1e-6)
    assert bool(out["opens_headroom"]) and bool(out["restores_variance"])
    # before the switch the replaced block was saturated: no headroom, no variance, zero advantages
    before = replacement_stats(S_EVT, MAX_EVT, np.array([False, True]))
    assert float(before["headroom"]) == 0.0 and float(before["variance"]) == 0.0
    assert float(before["mean_abs_adv"]) == 0.0
    assert not bool(before["opens_headroom"]) and not bool(before["restores_variance"])


# ---- RLMR ---------------------------------------------------------------------------------------


def test_rlmr_penalty_one_violator_hand():
    r = np.array([0.9, 0.5, 0.2, 0.7], np.float32)
    v = np.array([True, False, False, False])
    # n = 4, k = 1, r_vio_max = 0.9, sum = 2.3: delta = (3.6 + 0.4 - 2.3) / 3 = 1.7 / 3
    np.testing.assert_allclose(rlmr_delta(r, v, 0.1), 1.7 / 3, rtol=1e-6)
    r_new, all_v = rlmr_penalty(r, v, 0.1)
    np.testing.assert_allclose(r_new, [0.9 - 1.7 / 3, 0.5, 0.2, 0.7], rtol=1e-6)
    assert not bool(all_v)
    # the violator ends exactly gamma below the new mean
    np.testing.assert_allclose(np.mean(r_new) - r_new[0], 0.1, rtol=1e-5)


def test_rlmr_penalty_two_violators_hand():
    r = np.array([0.8, 0.6, 0.4, 0.2], np.float32)
    v = np.array([True, True, False, False])
    # delta = (4*0.8 + 4*0.05 - 2.0) / 2 = 0.7 -> [0.1, -0.1, 0.4, 0.2], mean 0.15
    r_new, _ = rlmr_penalty(r, v, 0.05)
    np.testing.assert_allclose(r_new, [0.1, -0.1, 0.4, 0.2], atol=1e-6)


def test_rlmr_penalty_edge_cases():
    # delta clipped at 0: the violator is already far below the mean
    r = np.array([0.0, 1.0, 1.0], np.float32)
    r_new, all_v = rlmr_penalty(r, np.array([True, False, False]), 0.1)
    np.testing.assert_array_equal(r_new, r)
    assert not bool(all_v)
    # k = 0: unchanged, kept
    r_new, all_v = rlmr_penalty(r, np.zeros(3, bool), 0.1)
    np.testing.assert_array_equal(r_new, r)
    assert not bool(all_v)
    # k = n: unchanged, flagged as carrying no constraint signal
    r_new, all_v = rlmr_penalty(r, np.ones(3, bool), 0.1)
    np.testing.assert_array_equal(r_new, r)
    assert bool(all_v)
    assert np.all(np.isfinite(np.asarray(rlmr_delta(r, np.ones(3, bool), 0.1))))


def test_linear_mix_and_verifier_metrics_hand():
    np.testing.assert_allclose(linear_mix(np.array([0.2, 0.8]), np.array([1, 0]), 0.7, 0.3), [0.44, 0.56], rtol=1e-6)
    pred = np.array([True, True, False, False, True, True])
    true = np.array([True, False, True, False, True, False])
    # TP = 2, FP = 2, FN = 1
    prec, rec = verifier_precision_recall(pred, true)
    np.testing.assert_allclose([prec, rec], [0.5, 2 / 3], rtol=1e-6)
    prec, rec = verifier_precision_recall(np.zeros(3, bool), np.zeros(3, bool))
    assert float(prec) == 1.0 and float(rec) == 1.0


def test_flip_labels():
    v = np.array([True, False, True, False])
    key = jax.random.key(0)
    np.testing.assert_array_equal(flip_labels(key, v, 0.0), v)
    np.testing.assert_array_equal(flip_labels(key, v, 1.0), ~v)
    many = np.asarray(flip_labels(key, np.zeros(4000, bool), 0.2))
    np.testing.assert_allclose(many.mean(), 0.2, atol=0.03)


# ---- bonuses ------------------------------------------------------------------------------------


def test_exploration_bonus_hand():
    h = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], np.float32)
    # sum_j h_j h_j^T + I = diag(2, 3): b0 = sqrt(1/2), b1 = b2 = sqrt(1/3)
    want = [np.sqrt(0.5), np.sqrt(1 / 3), np.sqrt(1 / 3)]
    np.testing.assert_allclose(exploration_bonus(h, 1.0), want, rtol=1e-5)
    # d > G takes the kernel path; zero padding does not change the answer
    h_wide = np.concatenate([h, np.zeros((3, 3), np.float32)], axis=1)
    np.testing.assert_allclose(exploration_bonus(h_wide, 1.0), want, rtol=1e-5)
    # lam = 2: diag(3, 4) -> sqrt(1/3), sqrt(1/4)
    np.testing.assert_allclose(exploration_bonus(h, 2.0), [np.sqrt(1 / 3), 0.5, 0.5], rtol=1e-5)


def test_exploration_bonus_paths_agree_on_random_features():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(6, 5)).astype(np.float32)
    narrow = np.asarray(exploration_bonus(h, 0.5))
    wide = np.asarray(exploration_bonus(np.concatenate([h, np.zeros((6, 4), np.float32)], 1), 0.5))
    hh = h.astype(np.float64)
    ref = np.sqrt(np.einsum("gd,de,ge->g", hh, np.linalg.inv(hh.T @ hh + 0.5 * np.eye(5)), hh))
    np.testing.assert_allclose(narrow, ref, rtol=1e-4)
    np.testing.assert_allclose(wide, ref, rtol=1e-4)
    assert np.all(narrow < 1.0)


def test_usefulness_bonus_hand():
    plain = np.array([2.0, 3.0, 4.0], np.float32)
    withx = np.array([[9.0, 2.5, 3.0], [1.5, 9.0, 3.5], [1.8, 2.9, 9.0]], np.float32)
    # u0 = ((3 - 2.5) + (4 - 3)) / 2, u1 = ((2 - 1.5) + (4 - 3.5)) / 2, u2 = ((2 - 1.8) + (3 - 2.9)) / 2
    np.testing.assert_allclose(usefulness_bonus(plain, withx), [0.75, 0.5, 0.15], rtol=1e-5)
    np.testing.assert_array_equal(usefulness_bonus(np.array([1.0]), np.array([[5.0]])), [0.0])


def test_mean_pool_projection_and_add_bonuses_hand():
    hid = np.array([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], np.float32)
    np.testing.assert_allclose(mean_pool(hid, np.array([[1, 1, 0]])), [[2.0, 3.0]])
    np.testing.assert_allclose(mean_pool(hid, np.array([[0, 0, 0]])), [[0.0, 0.0]])
    proj = random_projection(jax.random.key(0), 16, 4)
    assert proj.shape == (16, 4)
    np.testing.assert_array_equal(proj, random_projection(jax.random.key(0), 16, 4))
    r = np.array([0.0, 0.0, 1.0], np.float32)
    z = 1 / (np.sqrt(2 / 3) + 1e-6)  # standardised [1, 2, 3] = [-z, 0, z]
    out = add_bonuses(r, [np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0])], [0.5, 10.0])
    np.testing.assert_allclose(out, [-0.5 * z, 0.0, 1 + 0.5 * z], rtol=1e-6)
    with pytest.raises(ValueError):
        add_bonuses(r, [r], [1.0, 2.0])


# ---- judge health -------------------------------------------------------------------------------


def test_position_bias_hand():
    # off-diagonal mean: (0.8 + 0.6 + 0.4 + 0.7 + 0.2 + 0.9) / 6 = 0.6 (diagonal 0.99 ignored)
    np.testing.assert_allclose(position_bias(P_FIRST), 0.6, rtol=1e-6)
    mask = np.zeros((3, 3), bool)
    mask[1, 2] = True  # judged (1,2) in both orders: (0.7 + 0.9) / 2
    np.testing.assert_allclose(position_bias(P_FIRST, mask), 0.8, rtol=1e-6)
    np.testing.assert_allclose(position_bias(np.stack([P_FIRST, 1 - P_FIRST], -1)), 0.5, rtol=1e-6)
    np.testing.assert_allclose(position_bias_flat(np.array([0.9, 0.7, 0.1]), np.array([True, True, False])), 0.8)


def test_order_agreement_hand():
    # (0,1) agree, (0,2) agree, (1,2) both orders favour the first slot -> disagree
    np.testing.assert_allclose(order_agreement(P_FIRST), 2 / 3, rtol=1e-6)
    mask = np.zeros((3, 3), bool)
    mask[0, 1] = True
    assert float(order_agreement(P_FIRST, mask)) == 1.0


def test_invalid_fraction_and_entropy_hand():
    np.testing.assert_allclose(invalid_fraction(np.array([True, False, True, True])), 0.25)
    # over the counted entries only: 1 valid of 3 counted; nothing counted -> 0
    np.testing.assert_allclose(invalid_fraction(np.array([True, False, False, True]),
                                                np.array([True, True, True, False])), 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(invalid_fraction(np.array([False, False]), np.array([False, False])), 0.0)
    probs = np.array([[0.5, 0.5], [1.0, 0.0]], np.float32)
    # (ln 2 + 0) / 2
    np.testing.assert_allclose(verdict_entropy(probs), np.log(2) / 2, rtol=1e-6)
    np.testing.assert_allclose(verdict_entropy(probs, np.array([False, True])), 0.0, atol=1e-7)
    np.testing.assert_allclose(verdict_entropy(np.full((2, 5), 0.2)), np.log(5), rtol=1e-6)


# ---- everything jits and vmaps over prompts ----------------------------------------------------

B, G, C = 3, 4, 3


def _batched_inputs():
    rng = np.random.default_rng(7)
    f32 = np.float32
    return {
        "p_first": rng.uniform(size=(B, G, G, C)).astype(f32),
        "logits": rng.normal(size=(B, G, G, C, 2)).astype(f32),
        "w": rng.uniform(size=(B, G, C)).astype(f32),
        "lam": np.tile(np.array([0.2, 0.3, 0.5], f32), (B, 1)),
        "s": rng.integers(0, 5, size=(B, G, C)).astype(f32),
        "max": np.tile(np.array([4, 4, 2], f32), (B, 1)),
        "valid": rng.uniform(size=(B, G, C)) > 0.2,
        "set": np.tile(np.array([True, False, True]), (B, 1)),
        "r": rng.uniform(size=(B, G)).astype(f32),
        "viol": np.array([[True, False, False, True], [False] * 4, [True] * 4]),
        "h": rng.normal(size=(B, G, 6)).astype(f32),
        "nll": rng.uniform(1, 3, size=(B, G)).astype(f32),
        "nll2": rng.uniform(1, 3, size=(B, G, G)).astype(f32),
        "mask": np.tile(circular_pairs_mask(G), (B, 1, 1)),
    }


CASES = {
    "symmetrize": (lambda x: symmetrize(x["p_first"])),
    "first_win_probs": (lambda x: first_win_probs(x["logits"])),
    "hard_verdicts": (lambda x: hard_verdicts(x["logits"])),
    "win_rates": (lambda x: win_rates(x["p_first"])),
    "win_rates_masked": (lambda x: win_rates(x["p_first"], x["mask"])),
    "pairwise_reward": (lambda x: pairwise_reward(x["w"], x["lam"])),
    "normalised_scores": (lambda x: normalised_scores(x["s"], x["max"])),
    "absolute_reward": (lambda x: absolute_reward(x["s"], x["max"], x["lam"], x["valid"])),
    "rare_reward": (lambda x: rare_reward(x["s"], x["max"], x["valid"])),
    "saturated_criteria": (lambda x: saturated_criteria(x["s"], x["valid"], x["max"])),
    "replacement_budget": (lambda x: replacement_budget(x["set"])),
    "switch_bound": (lambda x: switch_bound(x["max"], x["set"])),
    "criterion_stats": (lambda x: criterion_stats(x["s"], x["max"])),
    "set_stats": (lambda x: set_stats(x["s"], x["max"], x["set"])),
    "replacement_stats": (lambda x: replacement_stats(x["s"], x["max"], x["set"])),
    "rlmr_penalty": (lambda x: rlmr_penalty(x["r"], x["viol"], 0.1)),
    "rlmr_delta": (lambda x: rlmr_delta(x["r"], x["viol"], 0.1)),
    "linear_mix": (lambda x: linear_mix(x["r"], x["viol"], 0.6, 0.4)),
    "verifier_precision_recall": (lambda x: verifier_precision_recall(x["viol"], x["valid"][:, 0])),
    "exploration_bonus": (lambda x: exploration_bonus(x["h"], 1.0)),
    "usefulness_bonus": (lambda x: usefulness_bonus(x["nll"], x["nll2"])),
    "add_bonuses": (lambda x: add_bonuses(x["r"], [x["nll"]], [0.3])),
    "position_bias": (lambda x: position_bias(x["p_first"], x["mask"])),
    "position_bias_flat": (lambda x: position_bias_flat(x["r"])),
    "order_agreement": (lambda x: order_agreement(x["p_first"])),
    "invalid_fraction": (lambda x: invalid_fraction(x["valid"])),
    "verdict_entropy": (lambda x: verdict_entropy(jax.nn.softmax(x["logits"], -1))),
}


@pytest.mark.slow
def test_all_cases_jit_and_vmap_over_prompts():
    xs = _batched_inputs()
    batched = jax.jit(lambda x: {name: jax.vmap(fn)(x) for name, fn in CASES.items()})(xs)
    per_prompt = jax.jit(lambda x: {name: fn(x) for name, fn in CASES.items()})
    for b in range(B):
        one = per_prompt({k: v[b] for k, v in xs.items()})
        for name in CASES:
            for got, want in zip(jax.tree.leaves(batched[name]), jax.tree.leaves(one[name])):
                np.testing.assert_allclose(
                    np.asarray(got)[b], np.asarray(want), rtol=1e-5, atol=1e-6, err_msg=name
                )
