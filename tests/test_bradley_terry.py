"""evals.bradley_terry: recovery of known strengths, soft vs hard outcomes, anchoring, bootstrap coverage,
length control, win-rate matrix, judge agreement and the `rate` bundle."""
import json
import math

import numpy as np
import pytest

from evals import bradley_terry as bt


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _round_robin(rng, num_models, num_prompts, per_pair=1):
    """Every unordered pair compared `per_pair` times on each prompt, sides shuffled."""
    pairs = [(i, j) for i in range(num_models) for j in range(i + 1, num_models)]
    a, b, prompt = [], [], []
    for q in range(num_prompts):
        for i, j in pairs:
            for _ in range(per_pair):
                if rng.random() < 0.5:
                    i, j = j, i
                a.append(i)
                b.append(j)
                prompt.append(q)
    return np.array(a), np.array(b), np.array(prompt)


def test_hard():
    np.testing.assert_array_equal(bt.hard([0.0, 0.2, 0.5, 0.51, 1.0]), [0.0, 0.0, 0.5, 1.0, 1.0])


def test_recovers_known_strengths():
    rng = np.random.default_rng(0)
    true_elo = np.array([0.0, 120.0, -150.0, 260.0, 40.0])
    theta = true_elo / bt.ELO_SCALE
    K = 20000
    a = rng.integers(0, 5, K)
    b = (a + rng.integers(1, 5, K)) % 5
    wins = (rng.random(K) < _sigmoid(theta[a] - theta[b])).astype(float)
    r = bt.fit(a, b, wins, 5, anchor=0, anchor_rating=1000.0)
    np.testing.assert_array_equal(np.argsort(r), np.argsort(true_elo))
    np.testing.assert_allclose(r - 1000.0, true_elo, atol=25.0)
    # the same data with sides swapped and outcomes flipped gives the same ratings
    np.testing.assert_allclose(bt.fit(b, a, 1.0 - wins, 5), r, atol=1e-6)


def test_soft_outcomes_equal_averaged_hard_ones():
    rng = np.random.default_rng(1)
    M, K = 4, 300
    a = rng.integers(0, M, K)
    b = (a + rng.integers(1, M, K)) % M
    p = rng.integers(0, 11, K) / 10.0           # soft preferences in steps of 0.1
    soft = bt.fit(a, b, p, M)
    # exact: 10 hard verdicts per comparison with 10 p of them wins, each weighted 1/10
    reps = 10
    aa, bb = np.repeat(a, reps), np.repeat(b, reps)
    wins = np.concatenate([np.r_[np.ones(int(round(10 * q))), np.zeros(reps - int(round(10 * q)))] for q in p])
    hard = bt.fit(aa, bb, wins, M, weights=np.full(aa.size, 1.0 / reps))
    np.testing.assert_allclose(soft, hard, atol=1e-6)
    # statistical: many Bernoulli(p) verdicts per comparison approach the soft fit
    n = 400
    draws = (rng.random((K, n)) < p[:, None]).astype(float).reshape(-1)
    sampled = bt.fit(np.repeat(a, n), np.repeat(b, n), draws, M)
    np.testing.assert_allclose(sampled, soft, atol=12.0)
    assert np.ptp(soft) > 20.0  # the check above is not vacuous


def test_anchor_gets_anchor_rating_exactly():
    rng = np.random.default_rng(2)
    a, b, _ = _round_robin(rng, 4, 30)
    p = rng.random(a.size)
    r = bt.fit(a, b, p, 4, anchor=2, anchor_rating=1234.5)
    assert r[2] == 1234.5
    r0 = bt.fit(a, b, p, 4)
    np.testing.assert_allclose(r - r[2], r0 - r0[2], atol=1e-9)  # the anchor only shifts
    assert bt.fit(a, b, p, 4, anchor=None, anchor_rating=1500.0).mean() == pytest.approx(1500.0)


def test_disconnected_and_unbeaten_models_stay_finite():
    # 0 always beats 1; 2 and 3 only play each other; 4 never plays
    a = np.array([0, 0, 0, 2, 3])
    b = np.array([1, 1, 1, 3, 2])
    p = np.array([1.0, 1.0, 1.0, 1.0, 0.5])
    r = bt.fit(a, b, p, 5)
    assert np.all(np.isfinite(r))
    assert r[0] > r[1] and r[2] > r[3]
    theta, _ = bt.fit_with_features(a, b, p, 5)
    assert theta[4] == 0.0  # never compared: the ridge keeps it at the origin
    assert r[4] == pytest.approx(1000.0 - bt.ELO_SCALE * theta[0])
    assert r[0] - r[1] > 400.0  # unbeaten: far ahead, but finite


def test_bootstrap_intervals_cover_truth():
    true_elo = np.array([0.0, 80.0, -60.0, 150.0])
    theta = true_elo / bt.ELO_SCALE
    covered = total = 0
    widths = []
    for trial in range(20):
        rng = np.random.default_rng(100 + trial)
        a, b, prompt = _round_robin(rng, 4, 40)
        wins = (rng.random(a.size) < _sigmoid(theta[a] - theta[b])).astype(float)
        lo, hi = bt.bootstrap(a, b, wins, prompt, 4, reps=60, seed=trial, level=0.95)
        assert lo[0] == hi[0] == 1000.0  # the anchor is pinned in every replicate
        for m in range(1, 4):
            total += 1
            covered += lo[m] <= 1000.0 + true_elo[m] <= hi[m]
            widths.append(hi[m] - lo[m])
    assert covered / total >= 0.8, (covered, total)
    assert 20.0 < np.median(widths) < 400.0  # informative, not degenerate


def test_identical_models_overlap():
    rng = np.random.default_rng(3)
    theta = np.array([0.0, 0.0, 1.0])  # 0 and 1 are copies
    a, b, prompt = _round_robin(rng, 3, 80)
    p = _sigmoid(theta[a] - theta[b])
    copy = ((a == 0) & (b == 1)) | ((a == 1) & (b == 0))
    p = np.clip(np.where(copy, 0.5 + rng.normal(0, 0.1, a.size), (rng.random(a.size) < p)), 0, 1)
    r = bt.fit(a, b, p, 3, anchor=2)
    lo, hi = bt.bootstrap(a, b, p, prompt, 3, reps=100, seed=0, anchor=2)
    assert hi[0] - lo[0] > 5 and hi[1] - lo[1] > 5
    assert lo[0] <= hi[1] and lo[1] <= hi[0]
    assert lo[0] <= r[0] <= hi[0]
    assert hi[0] < 1000.0 and hi[1] < 1000.0  # both clearly below the stronger model


def test_length_control_removes_pure_length_advantage():
    rng = np.random.default_rng(4)
    theta = np.array([0.0, 0.0, 0.8])          # 1 is model 0 made verbose; 2 is really better
    base_len = np.array([200.0, 600.0, 200.0])
    beta = 1.2                                  # the judge likes long answers
    a, b, prompt = _round_robin(rng, 3, 1500)
    la = base_len[a] * rng.lognormal(0, 0.5, a.size)
    lb = base_len[b] * rng.lognormal(0, 0.5, a.size)
    p = _sigmoid(theta[a] - theta[b] + beta * (np.log(la) - np.log(lb)))
    raw = bt.fit(a, b, p, 3)
    lc, beta_hat = bt.length_controlled(a, b, p, la, lb, 3, return_beta=True)
    raw_gap, lc_gap = raw[1] - raw[0], lc[1] - lc[0]
    assert raw_gap > 150.0
    assert abs(lc_gap) < 15.0
    assert lc[2] - lc[0] == pytest.approx(0.8 * bt.ELO_SCALE, abs=15.0)
    # beta is per unit of the rms-normalised log-length ratio
    x = np.log(la / lb)
    assert beta_hat == pytest.approx(beta * np.sqrt(np.mean(x * x)), rel=0.05)
    # with no length preference, LC and raw agree
    p0 = _sigmoid(theta[a] - theta[b])
    np.testing.assert_allclose(bt.length_controlled(a, b, p0, la, lb, 3), bt.fit(a, b, p0, 3), atol=10.0)


def test_length_feature_kinds():
    x = bt.length_feature([100, 400, 50], [100, 100, 200], "log_ratio")
    np.testing.assert_allclose(x, np.log([1, 4, 0.25]) / np.sqrt(np.mean(np.log([1, 4, 0.25]) ** 2)))
    d = bt.length_feature([3, 1], [1, 3], "diff")
    np.testing.assert_allclose(d, [1.0, -1.0])
    np.testing.assert_allclose(bt.length_feature([3, 1], [1, 3], "tanh_diff"), np.tanh([1.0, -1.0]))
    with pytest.raises(ValueError):
        bt.length_feature([1], [1], "bogus")


def test_win_rates_hand_computed():
    a = np.array([0, 0, 1, 2, 1])
    b = np.array([1, 1, 0, 0, 1])   # the last is a self-comparison: ignored
    p = np.array([1.0, 0.5, 0.25, 0.0, 0.9])
    W = bt.win_rates(a, b, p, 3)
    # 0 vs 1: 1, 0.5, and 1 - 0.25 from 0's side -> 2.25 / 3
    assert W[0, 1] == pytest.approx(0.75)
    assert W[1, 0] == pytest.approx(0.25)
    assert W[0, 2] == pytest.approx(1.0)
    assert W[2, 0] == pytest.approx(0.0)
    assert np.isnan(W[1, 2]) and np.isnan(W[2, 1])
    assert np.all(np.isnan(np.diag(W)))


def test_win_rate_intervals_by_hand_and_by_what_they_cover():
    # two prompts: on prompt 0 model 1 wins both orders outright, on prompt 1 it loses both. A replicate draws
    # 0, 1 or 2 copies of prompt 0 out of 2 (probability 1/4, 1/2, 1/4), so W[1, 0] is 0, 1/2 or 1 and the
    # 95% interval runs from 0 to 1; with reps = 0 there is none.
    a, b, p, prompt = [1, 0, 1, 0], [0, 1, 0, 1], [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1]
    lo, hi = bt.win_rate_intervals(a, b, p, prompt, 2, reps=400, seed=0)
    assert (lo[1, 0], hi[1, 0], lo[0, 1], hi[0, 1]) == (0.0, 1.0, 0.0, 1.0)
    assert np.isnan(bt.win_rate_intervals(a, b, p, prompt, 2, reps=0)[0]).all()
    # every prompt alike: every replicate equals the point estimate
    lo, hi = bt.win_rate_intervals([1, 0] * 5, [0, 1] * 5, [0.8, 0.2] * 5, np.repeat(np.arange(5), 2), 2, reps=50)
    assert lo[1, 0] == pytest.approx(0.8) and hi[1, 0] == pytest.approx(0.8)
    # a model that wins 70% of the time on average over 40 noisy prompts: the interval holds 0.7, excludes 0.5,
    # and mirrors its opponent's (W[i, j] + W[j, i] = 1 in every replicate); a model three never meets stays NaN
    rng = np.random.default_rng(0)
    a, b, p, prompt = [], [], [], []
    for q in range(40):
        for x, y in ((0, 1), (1, 0)):
            a.append(x), b.append(y), prompt.append(q)
            p.append(float(np.clip((0.7 if x == 1 else 0.3) + 0.2 * rng.normal(), 0, 1)))
    W = bt.win_rates(a, b, p, 3)
    lo, hi = bt.win_rate_intervals(a, b, p, prompt, 3, reps=2000, seed=1)
    assert 0.5 < lo[1, 0] < W[1, 0] < hi[1, 0] and lo[1, 0] < 0.7 < hi[1, 0]
    assert lo[0, 1] == pytest.approx(1 - hi[1, 0]) and hi[0, 1] == pytest.approx(1 - lo[1, 0])
    assert np.isnan(lo[2, 0]) and np.isnan(hi[0, 2]) and np.isnan(np.diag(lo)).all()
    # equal models: the interval holds 0.5
    p_eq = [float(np.clip(0.5 + 0.2 * rng.normal(), 0, 1)) for _ in a]
    lo, hi = bt.win_rate_intervals(a, b, p_eq, prompt, 2, reps=2000, seed=1)
    assert lo[1, 0] < 0.5 < hi[1, 0]


def test_judge_agreement_hand_computed():
    P = np.array([[0.9, 0.2, 0.5, 0.7],
                  [0.8, 0.6, 0.1, 0.3],
                  [1.0, 0.0, 0.5, np.nan]])
    ag = bt.judge_agreement(P, ["j0", "j1", "j2"])
    A, n = np.array(ag["agreement"], dtype=float), np.array(ag["n"])
    # j0-j1: k0 agree, k1 disagree, k2 tie (ignored), k3 disagree
    assert A[0, 1] == pytest.approx(1 / 3) and n[0, 1] == 3
    # j0-j2: k0, k1 agree; k2 tie; k3 unrated
    assert A[0, 2] == pytest.approx(1.0) and n[0, 2] == 2
    # j1-j2: k0 agree, k1 disagree
    assert A[1, 2] == pytest.approx(0.5) and n[1, 2] == 2
    np.testing.assert_allclose(A, A.T)
    assert ag["mean_agreement"] == pytest.approx((1 / 3 + 1.0 + 0.5) / 3)
    C = np.array(ag["correlation"], dtype=float)
    assert C[0, 1] == pytest.approx(np.corrcoef(P[0], P[1])[0, 1])
    assert C[0, 2] == pytest.approx(np.corrcoef(P[0, :3], P[2, :3])[0, 1])
    assert C[0, 0] == pytest.approx(1.0)


def _sample_comparisons(seed=5, judges=2):
    rng = np.random.default_rng(seed)
    theta = np.array([0.0, 0.5, -0.4, 1.0])
    a, b, prompt = _round_robin(rng, 4, 25)
    la = rng.integers(50, 400, a.size)
    lb = rng.integers(50, 400, a.size)
    true_p = _sigmoid(theta[a] - theta[b])
    rows = {k: [] for k in ("a", "b", "p_a", "prompt", "len_a", "len_b", "judge")}
    for j in range(judges):
        noisy = np.clip(true_p + rng.normal(0, 0.15, a.size), 0, 1)
        for k, v in (("a", a), ("b", b), ("p_a", noisy), ("prompt", prompt), ("len_a", la), ("len_b", lb),
                     ("judge", np.full(a.size, f"judge{j}"))):
            rows[k].append(v)
    return {k: np.concatenate(v) for k, v in rows.items()}


def test_rate_bundle():
    comps = _sample_comparisons()
    names = ["base", "sft", "weak", "grpo"]
    res = bt.rate(comps, names, bootstrap_reps=30, seed=0)
    json.dumps(res, allow_nan=False)  # strict JSON
    assert [m["name"] for m in res["models"]] == ["grpo", "sft", "base", "weak"]
    elos = [m["elo"] for m in res["models"]]
    assert elos == sorted(elos, reverse=True)
    by = {m["name"]: m for m in res["models"]}
    assert by["base"]["elo"] == 1000.0
    for m in res["models"]:
        assert set(m) == {"name", "elo", "lo", "hi", "lc_elo", "lc_lo", "lc_hi", "n"}
        assert m["lo"] <= m["elo"] + 1e-6 and m["elo"] <= m["hi"] + 1e-6
        assert m["n"] == 2 * 3 * 25  # two judges x three opponents x 25 prompts
    assert res["win_rate"]["names"] == names
    W = np.array(res["win_rate"]["matrix"], dtype=float)  # None -> nan
    assert W.shape == (4, 4) and np.isnan(np.diag(W)).all()
    assert W[3, 0] > 0.5
    lo, hi = (np.array(res["win_rate"][k], dtype=float) for k in ("lo", "hi"))
    assert (lo[3, 0] <= W[3, 0] <= hi[3, 0]) and np.isnan(np.diag(lo)).all()
    ag = res["judge_agreement"]
    assert ag["judges"] == ["judge0", "judge1"]
    assert 0.5 < ag["mean_agreement"] <= 1.0
    assert ag["n"][0][1] > 100  # comparisons matched across judges by (prompt, pair)
    s = res["settings"]
    assert s["bootstrap_reps"] == 30 and s["num_comparisons"] == comps["a"].size and s["anchor"] == "base"
    assert s["judges"] == ["judge0", "judge1"]

    one = {k: v[: v.size // 2] for k, v in comps.items() if k != "judge"}
    res1 = bt.rate(one, names, bootstrap_reps=0, hard=True, anchor="grpo")
    assert res1["judge_agreement"] is None
    assert res1["models"][0]["lo"] is None
    assert {m["name"]: m for m in res1["models"]}["grpo"]["elo"] == 1000.0
    assert res1["settings"]["hard"] is True


def test_input_validation():
    with pytest.raises(ValueError):
        bt.fit([0, 1], [1, 0], [0.5, 1.5], 2)
    with pytest.raises(ValueError):
        bt.fit([0, 3], [1, 0], [0.5, 0.5], 2)
    with pytest.raises(ValueError):
        bt.fit([0], [1, 0], [0.5], 2)
    assert math.isfinite(bt.fit([0], [1], [1.0], 2)[1])
