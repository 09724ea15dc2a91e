"""evals/reward_forms.py: the reward forms, advantage alignment, pair accuracy and signal rate, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from evals import reward_forms as RF


def test_forms_by_hand():
    p = np.array([[0.9, 0.4], [0.95, 0.8], [0.6, 0.2]])
    c = np.array([[1, 0], [1, 1], [0, 0]], float)
    f = RF.form_rewards(p, c)
    np.testing.assert_allclose(f["program"], [0.5, 1.0, 0.0])
    np.testing.assert_allclose(f["hard"], [0.5, 1.0, 0.5])
    np.testing.assert_allclose(f["hard@0.75"], [0.5, 1.0, 0.0])
    np.testing.assert_allclose(f["hard@0.9"], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(f["soft"], [0.65, 0.875, 0.4])
    assert all(np.all(v == 1.0) for v in RF.form_rewards(np.zeros((3, 0)), np.zeros((3, 0))).values())
    with pytest.raises(ValueError, match="differ in shape"):
        RF.form_rewards(np.zeros((3, 2)), np.zeros((3, 1)))


def test_alignment_is_the_cosine_of_grpo_advantages():
    prog = [np.array([1.0, 0.0, 0.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0])]
    # the same ordering in another scale gives the program's advantages exactly
    assert RF.alignment([0.3 * r + 0.5 for r in prog], prog) == pytest.approx(1.0)
    assert RF.alignment([1.0 - r for r in prog], prog) == pytest.approx(-1.0)
    # a flat form carries nothing
    assert RF.alignment([np.ones(4), np.ones(4)], prog) == 0.0
    # hand-computed: the first group's advantages are +-1; form [1, 0, 1, 1] -> [1, -3, 1, 1] / sqrt(3)
    a = np.array([1.0, -3.0, 1.0, 1.0]) / np.sqrt(3.0)
    b = np.array([1.0, -1.0, -1.0, 1.0])
    want = (a @ b) / np.sqrt((a @ a) * (b @ b))
    assert RF.alignment([np.array([1.0, 0.0, 1.0, 1.0]), np.ones(4)], prog) == pytest.approx(want, abs=1e-5)


def test_pair_accuracy_counts_ties_as_half_and_skips_undecided_pairs():
    prog = [np.array([1.0, 0.0, 0.5])]
    # decided pairs: (0,1) 1>0, (0,2) 1>0.5, (1,2) 0<0.5
    acc, n = RF.pair_accuracy([np.array([0.9, 0.1, 0.9])], prog)  # right, tie, right
    assert n == 3 and acc == pytest.approx(2.5 / 3)
    acc, n = RF.pair_accuracy([np.array([0.0, 1.0, 0.5])], [np.array([1.0, 1.0, 1.0])])
    assert n == 0 and np.isnan(acc)
    assert RF.signal_rate([np.ones(3), np.array([0.0, 1.0, 1.0])]) == 0.5


def test_summary_intervals_hold_the_point_estimate():
    rng = np.random.default_rng(0)
    groups = []
    for _ in range(12):
        c = rng.integers(0, 2, (8, 1)).astype(float)
        groups.append((0.5 + 0.4 * c, c))  # a linear function of the program's verdict: its advantages exactly
    s = RF.summarise(groups, resamples=200)
    assert set(s) == set(RF.FORMS)
    assert s["program"]["alignment"] == pytest.approx(1.0) and s["soft"]["alignment"] == pytest.approx(1.0)
    assert s["soft"]["pair_accuracy"] == 1.0
    np.testing.assert_allclose(s["soft"]["alignment_ci"], [1.0, 1.0])  # every draw sums aligned groups
    np.testing.assert_allclose(s["soft"]["pair_accuracy_ci"], [1.0, 1.0])
    assert s["hard"]["signal"] == 0.0 and s["hard"]["alignment"] == 0.0  # every p_pass >= 1/2: all flat
    for f in RF.FORMS:
        lo, hi = s[f]["alignment_ci"]
        assert lo - 1e-9 <= s[f]["alignment"] <= hi + 1e-9


def test_summary_point_estimates_equal_the_direct_formulas():
    """summarise sums per-group dot products and pair counts; alignment / pair_accuracy concatenate: same numbers."""
    rng = np.random.default_rng(1)
    groups = [(rng.uniform(0, 1, (8, 2)), rng.integers(0, 2, (8, 2)).astype(float)) for _ in range(10)]
    s = RF.summarise(groups, resamples=50)
    rewards = [RF.form_rewards(p, c) for p, c in groups]
    prog = [r["program"] for r in rewards]
    for f in RF.FORMS:
        rf = [r[f] for r in rewards]
        assert s[f]["alignment"] == pytest.approx(RF.alignment(rf, prog), abs=1e-6)
        acc, n = RF.pair_accuracy(rf, prog)
        assert (s[f]["pair_accuracy"], s[f]["decided_pairs"]) == (pytest.approx(acc), n)
    with pytest.raises(ValueError, match="no groups"):
        RF.summarise([])


def test_trusted_kinds_are_chosen_without_the_prompt_they_score():
    """Three prompts; kind "a" is ordered right on prompts 0 and 1, kind "b" wrong everywhere. By hand: prompt 0
    sees "a" from prompt 1 only (1 hit of 1 pair, under min_pairs=2: untrusted), prompt 2 sees "a" from 0 and 1."""
    c = np.array([[1.0], [0.0]])
    right, wrong = np.array([[0.9], [0.2]]), np.array([[0.2], [0.9]])
    groups = [(right, c), (right, c), (np.hstack([wrong, right]), np.hstack([c, c]))]
    kinds = [["a"], ["a"], ["b", "a"]]
    got = RF.trusted_soft(groups, kinds, min_pairs=2)
    # prompt 0: "a" elsewhere = prompt 1 (1/1) + prompt 2 (1/1) = 2 hits of 2 pairs: trusted -> its p
    np.testing.assert_allclose(got[0], [0.9, 0.2])
    np.testing.assert_allclose(got[1], [0.9, 0.2])
    # prompt 2: "b" elsewhere has no pairs (untrusted); "a" elsewhere 2/2: only column 1 counts
    np.testing.assert_allclose(got[2], [0.9, 0.2])
    # with "a" wrong on the other prompts, prompt 2 trusts nothing: flat ones
    groups[0] = groups[1] = (wrong, c)
    got = RF.trusted_soft(groups, kinds, min_pairs=2)
    np.testing.assert_allclose(got[2], [1.0, 1.0])
    # a kind's own prompt never decides its trust: prompt 0 sees "a" 1 right (prompt 2) of 2 pairs, not > 1/2
    np.testing.assert_allclose(got[0], [1.0, 1.0])
    s = RF.summarise(groups, kinds=kinds, resamples=20)
    assert set(s) == {*RF.FORMS, RF.TRUSTED}


def test_pairwise_reading_by_hand():
    """One prompt, 3 rollouts, 2 instructions. Program: rollout 0 keeps both, 1 keeps the first, 2 keeps none.
    Decided (pair, instruction): (0,1) on k=1; (0,2) on k=0 and k=1; (1,2) on k=0: four comparisons."""
    c = np.array([[1, 1], [1, 0], [0, 0]], float)
    assert RF.decided_pairs(c) == [(0, 1), (0, 2), (1, 2)]
    assert RF.decided_pairs(np.ones((3, 2))) == []
    p = np.array([[0.9, 0.2], [0.5, 0.6], [0.5, 0.6]])
    # pointwise: (0,1,k1) 0.2<0.6 wrong; (0,2,k0) right; (0,2,k1) wrong; (1,2,k0) tie 1/2 -> 1.5/4
    pair_p = [{(0, 1): np.array([0.1, 0.8]), (0, 2): np.array([0.5, 0.3]), (1, 2): np.array([0.7, 0.9])}]
    # pairwise: (0,1,k1) 0.8 right; (0,2,k0) 0.5 tie 1/2; (0,2,k1) 0.3 wrong; (1,2,k0) right -> 2.5/4
    r = RF.pairwise_reading([p], [c], pair_p, resamples=10)
    assert r["comparisons"] == 4
    assert r["pairwise"]["pair_accuracy"] == pytest.approx(2.5 / 4)
    assert r["pointwise"]["pair_accuracy"] == pytest.approx(1.5 / 4)
    np.testing.assert_allclose(r["pairwise"]["pair_accuracy_ci"], [0.625, 0.625])  # one prompt: every draw the same
