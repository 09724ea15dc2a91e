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
