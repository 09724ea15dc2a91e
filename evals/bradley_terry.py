"""Bradley-Terry ratings from pairwise judge verdicts, on the ELO scale (pure numpy).

A comparison k puts model a[k] against model b[k]; p_a[k] in [0, 1] is how much the judge prefers a[k]: a hard
verdict (1 win, 0 loss, 0.5 tie) or a soft one (the judge's probability that a[k] is better, or the mean of
several verdicts). Under Bradley-Terry each model has a strength theta and

    P(a beats b) = s(theta_a - theta_b),            s(x) = 1 / (1 + exp(-x)).

Strengths are fitted by maximum likelihood with soft targets (a convex problem, solved by damped Newton), then put
on the ELO scale, where a 400-point gap means 10:1 odds:

    rating_m = anchor_rating + (400 / ln 10) * (theta_m - theta_anchor).

Also here: prompt-clustered bootstrap intervals, length-controlled ratings (a judge's taste for long answers
regressed out), win-rate matrices, agreement between judges, and `rate`, which bundles all of it into one
JSON-serialisable dict for `evals.report.write_report`.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, Optional, Sequence

import numpy as np

__all__ = [
    "ELO_SCALE", "hard", "fit", "fit_with_features", "bootstrap", "length_feature", "length_controlled",
    "win_rates", "win_rate_intervals", "judge_agreement", "rate",
]

ELO_SCALE = 400.0 / math.log(10.0)  # rating points per unit of theta (log-odds)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free logistic


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def hard(p: Any) -> np.ndarray:
    """Soft preferences -> hard verdicts with ties as half: 1 if p > 0.5, 0 if p < 0.5, 0.5 if p == 0.5.

    `fit(a, b, hard(p), M)` is then the classic win/loss/tie Bradley-Terry fit (a tie counts as half a win for
    each side).
    """
    p = np.asarray(p, dtype=np.float64)
    return np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))


def _check(a, b, p_a, num_models, weights):
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    b = np.asarray(b, dtype=np.int64).reshape(-1)
    p = np.asarray(p_a, dtype=np.float64).reshape(-1)
    if not (a.shape == b.shape == p.shape):
        raise ValueError(f"a, b, p_a must have the same length, got {a.shape}, {b.shape}, {p.shape}")
    if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= num_models):
        raise ValueError(f"model indices must be in [0, {num_models})")
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("p_a must be finite and in [0, 1]")
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != p.shape or np.any(w < 0) or np.any(~np.isfinite(w)):
        raise ValueError("weights must be finite, non-negative and one per comparison")
    keep = a != b  # a model against itself carries no information
    return a[keep], b[keep], p[keep], w[keep], keep


def fit_with_features(a, b, p_a, num_models: int, features: Optional[np.ndarray] = None, *, weights=None,
                      l2: float = 1e-6, max_iter: int = 100, tol: float = 1e-10,
                      init: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Bradley-Terry with extra per-comparison covariates; returns (theta (M,), beta (F,)) in log-odds units.

        P(a_k beats b_k) = s(theta[a_k] - theta[b_k] + features[k] . beta)

    Maximises the weighted soft-target log-likelihood minus a small ridge penalty,

        L(theta, beta) = sum_k w_k [p_k log s(z_k) + (1 - p_k) log s(-z_k)] - (l2 / 2)(|theta|^2 + |beta|^2),

    which is concave (strictly, for l2 > 0), by Newton's method with backtracking. Gradient in z_k:
    w_k (p_k - s(z_k)); curvature: w_k s(z_k)(1 - s(z_k)). The ridge term pins down the free additive constant
    of theta and keeps models of disconnected comparison graphs (or with only wins) finite.
    """
    a, b, p, w, keep = _check(a, b, p_a, num_models, weights)
    if features is None:
        X = np.zeros((a.size, 0))
    else:
        X = np.asarray(features, dtype=np.float64)
        X = X.reshape(X.shape[0], -1)
        if X.shape[0] != keep.size:
            raise ValueError(f"features must have one row per comparison, got {X.shape[0]} for {keep.size}")
        X = X[keep]
    M = int(num_models)
    F = X.shape[1]
    n = M + F
    params = np.zeros(n) if init is None else np.array(init, dtype=np.float64).reshape(n)
    l2 = float(l2)
    if l2 <= 0:
        raise ValueError("l2 must be > 0 (it fixes the additive constant of the strengths)")

    def objective(q):
        z = q[a] - q[b] + X @ q[M:]
        return -(w * (p * _log_sigmoid(z) + (1 - p) * _log_sigmoid(-z))).sum() + 0.5 * l2 * (q @ q)

    f = objective(params)
    for _ in range(max_iter):
        z = params[a] - params[b] + X @ params[M:]
        s = _sigmoid(z)
        r = w * (s - p)                         # d(-L)/dz
        c = w * s * (1 - s)                     # d2(-L)/dz2
        # design matrix D (K, n): +1 at a, -1 at b, then the features; grad = D^T r, Hessian = D^T diag(c) D
        g = np.zeros(n)
        g[:M] = np.bincount(a, r, M) - np.bincount(b, r, M)
        g[M:] = X.T @ r
        g += l2 * params
        if np.max(np.abs(g)) < tol * max(1.0, w.sum()):
            break
        H = np.zeros((n, n))
        H[:M, :M] = (np.bincount(a * M + a, c, M * M) + np.bincount(b * M + b, c, M * M)
                     - np.bincount(a * M + b, c, M * M) - np.bincount(b * M + a, c, M * M)).reshape(M, M)
        if F:
            cx = c[:, None] * X                  # (K, F)
            Hf = np.stack([np.bincount(a, cx[:, j], M) - np.bincount(b, cx[:, j], M) for j in range(F)], 1)
            H[:M, M:] = Hf
            H[M:, :M] = Hf.T
            H[M:, M:] = X.T @ cx
        H[np.diag_indices(n)] += l2
        step = np.linalg.solve(H, g)
        decrease = g @ step                      # > 0: Newton direction descends
        t = 1.0
        while True:
            cand = params - t * step
            fc = objective(cand)
            if fc <= f - 1e-4 * t * decrease or t < 1e-12:
                break
            t *= 0.5
        if fc > f:                               # no progress possible at machine precision
            break
        params, f = cand, fc
        if decrease < 1e-20:
            break
    return params[:M].copy(), params[M:].copy()


def _to_elo(theta: np.ndarray, anchor: Optional[int], anchor_rating: float) -> np.ndarray:
    ref = theta.mean() if anchor is None else theta[int(anchor)]
    return anchor_rating + ELO_SCALE * (theta - ref)


def fit(a, b, p_a, num_models: int, *, anchor: Optional[int] = 0, anchor_rating: float = 1000.0, weights=None,
        l2: float = 1e-6) -> np.ndarray:
    """Bradley-Terry ELO ratings (M,) from soft pairwise outcomes.

    Strengths theta maximise  sum_k w_k [p_k log s(theta_a - theta_b) + (1 - p_k) log s(theta_b - theta_a)]
    - (l2 / 2)|theta|^2  (Newton's method; see `fit_with_features`), then

        rating = anchor_rating + (400 / ln 10)(theta - theta_anchor),

    so model `anchor` gets exactly `anchor_rating` (anchor=None: the mean rating is `anchor_rating`). Hard
    verdicts with ties as half are `fit(a, b, hard(p), M)`. Comparisons of a model with itself are ignored.
    """
    theta, _ = fit_with_features(a, b, p_a, num_models, None, weights=weights, l2=l2)
    return _to_elo(theta, anchor, anchor_rating)


def length_feature(len_a, len_b, kind: str = "log_ratio") -> np.ndarray:
    """Per-comparison length covariate x_k, scaled to unit root-mean-square over the comparisons:

        log_ratio:  x = log(len_a / len_b) / rms        (lengths clipped to >= 1)
        diff:       x = (len_a - len_b) / rms
        tanh_diff:  x = tanh((len_a - len_b) / rms)     (AlpacaEval-LC style, saturating)

    Antisymmetric (swapping a and b flips the sign), so the "no length difference" point is x = 0.
    """
    la = np.asarray(len_a, dtype=np.float64).reshape(-1)
    lb = np.asarray(len_b, dtype=np.float64).reshape(-1)
    if kind == "log_ratio":
        x = np.log(np.maximum(la, 1.0)) - np.log(np.maximum(lb, 1.0))
    elif kind in ("diff", "tanh_diff"):
        x = la - lb
    else:
        raise ValueError(f"length feature must be log_ratio, diff or tanh_diff, got {kind!r}")
    rms = float(np.sqrt(np.mean(x * x))) if x.size else 0.0
    x = x / rms if rms > 0 else np.zeros_like(x)
    return np.tanh(x) if kind == "tanh_diff" else x


def _length_design(a, b, len_a, len_b, feature: str) -> np.ndarray:
    """(K, 1) length covariate; normalised over the comparisons that count (a != b), 0 on self-comparisons."""
    keep = np.asarray(a).reshape(-1) != np.asarray(b).reshape(-1)
    la = np.asarray(len_a, dtype=np.float64).reshape(-1)
    lb = np.asarray(len_b, dtype=np.float64).reshape(-1)
    if not (la.shape == lb.shape == keep.shape):
        raise ValueError(f"len_a, len_b must have one entry per comparison, got {la.shape}, {lb.shape}")
    X = np.zeros((keep.size, 1))
    X[keep, 0] = length_feature(la[keep], lb[keep], feature)
    return X


def length_controlled(a, b, p_a, len_a, len_b, num_models: int, *, anchor: Optional[int] = 0,
                      anchor_rating: float = 1000.0, weights=None, l2: float = 1e-6, feature: str = "log_ratio",
                      return_beta: bool = False):
    """Length-controlled ELO ratings: Bradley-Terry with a length term, reported with the length term at zero.

        P(a beats b) = s(theta_a - theta_b + beta * x_k),     x_k = length_feature(len_a, len_b, feature)

    theta and beta are fitted jointly (logistic regression on soft targets). The reported ratings are
    anchor_rating + (400 / ln 10)(theta - theta_anchor): the predicted preference between two answers of equal
    length. beta > 0 means the judge favours longer answers. `return_beta`: also return beta (log-odds per unit
    of x). Only same-model length variation separates beta from theta; if every comparison of a pair has the same
    length gap, the split between them is decided by the tiny ridge penalty.
    """
    X = _length_design(a, b, len_a, len_b, feature)
    theta, beta = fit_with_features(a, b, p_a, num_models, X, weights=weights, l2=l2)
    ratings = _to_elo(theta, anchor, anchor_rating)
    return (ratings, float(beta[0])) if return_beta else ratings


def bootstrap(a, b, p_a, prompt, num_models: int, *, reps: int = 1000, seed: int = 0, level: float = 0.95,
              len_a=None, len_b=None, return_samples: bool = False, **fit_kw):
    """Percentile bootstrap intervals (lo, hi), each (M,), resampling prompts (clusters) with replacement.

    Each replicate draws P prompts out of the P distinct ones with replacement, keeps every comparison of a drawn
    prompt as many times as it was drawn (all models and judges of that prompt move together, so correlated
    verdicts on one prompt are not counted as independent), refits, and the interval is the
    [(1 - level)/2, (1 + level)/2] quantiles of the refitted ratings. With `len_a`/`len_b` the length-controlled
    fit is bootstrapped instead. `fit_kw` goes to `fit` / `length_controlled` (anchor, anchor_rating, l2, ...).
    The anchor model's interval is a single point (every replicate pins it); use anchor=None to spread the
    uncertainty over all models. `return_samples`: also return the (reps, M) replicate ratings.
    """
    p = np.asarray(p_a, dtype=np.float64).reshape(-1)
    _, pid = np.unique(np.asarray(prompt).reshape(-1), return_inverse=True)
    pid = pid.reshape(-1)
    n_prompts = int(pid.max()) + 1 if pid.size else 0
    base_w = fit_kw.pop("weights", None)
    base_w = np.ones_like(p) if base_w is None else np.asarray(base_w, dtype=np.float64).reshape(-1)
    anchor = fit_kw.pop("anchor", 0)
    anchor_rating = float(fit_kw.pop("anchor_rating", 1000.0))
    l2 = float(fit_kw.pop("l2", 1e-6))
    feature = fit_kw.pop("feature", "log_ratio")
    if fit_kw:
        raise TypeError(f"unexpected keyword arguments {sorted(fit_kw)}")
    X = None if len_a is None else _length_design(a, b, len_a, len_b, feature)
    # every replicate starts Newton from the full-data optimum (same answer, fewer iterations)
    theta0, beta0 = fit_with_features(a, b, p, num_models, X, weights=base_w, l2=l2)
    init = np.concatenate([theta0, beta0])
    rng = np.random.default_rng(seed)
    samples = np.empty((int(reps), int(num_models)))
    for r in range(int(reps)):
        counts = np.bincount(rng.integers(0, n_prompts, size=n_prompts), minlength=n_prompts).astype(np.float64)
        w = base_w * counts[pid]
        theta, _ = fit_with_features(a, b, p, num_models, X, weights=w, l2=l2, init=init)
        samples[r] = _to_elo(theta, anchor, anchor_rating)
    q = (1.0 - float(level)) / 2.0
    if reps > 0:
        lo, hi = np.quantile(samples, [q, 1.0 - q], axis=0)
    else:
        lo = hi = np.full(int(num_models), np.nan)
    return (lo, hi, samples) if return_samples else (lo, hi)


def win_rates(a, b, p_a, num_models: int) -> np.ndarray:
    """(M, M) matrix W with W[i, j] = mean preference of model i over model j over all their comparisons:

        W[i, j] = (sum_{k: a_k=i, b_k=j} p_k + sum_{k: a_k=j, b_k=i} (1 - p_k)) / #comparisons of {i, j}

    so W[i, j] + W[j, i] = 1. NaN on the diagonal and for pairs never compared.
    """
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    b = np.asarray(b, dtype=np.int64).reshape(-1)
    p = np.asarray(p_a, dtype=np.float64).reshape(-1)
    keep = a != b
    a, b, p = a[keep], b[keep], p[keep]
    M = int(num_models)
    s = np.zeros((M, M))
    n = np.zeros((M, M))
    np.add.at(s, (a, b), p)
    np.add.at(s, (b, a), 1.0 - p)
    np.add.at(n, (a, b), 1.0)
    np.add.at(n, (b, a), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        W = np.where(n > 0, s / np.maximum(n, 1), np.nan)
    W[np.diag_indices(M)] = np.nan
    return W


def win_rate_intervals(a, b, p_a, prompt, num_models: int, *, reps: int = 1000, seed: int = 0,
                       level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals (lo, hi), each (M, M), of the `win_rates` matrix, resampling prompts
    (clusters) with replacement as `bootstrap` does: a replicate weights every comparison of a prompt by the
    number of times the prompt was drawn, so

        W_r[i, j] = sum_k w_rk ([a_k=i, b_k=j] p_k + [a_k=j, b_k=i] (1 - p_k)) / sum_k w_rk [{a_k, b_k} = {i, j}]

    and lo/hi are its [(1 - level)/2, (1 + level)/2] quantiles over replicates (replicates that drew no
    comparison of a pair are left out for that pair). NaN on the diagonal, for pairs never compared, and when
    reps == 0. With two models, lo[1, 0] > 0.5 says the prompts support model 1 winning more often than not."""
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    b = np.asarray(b, dtype=np.int64).reshape(-1)
    p = np.asarray(p_a, dtype=np.float64).reshape(-1)
    _, pid = np.unique(np.asarray(prompt).reshape(-1), return_inverse=True)
    keep = a != b
    a, b, p, pid = a[keep], b[keep], p[keep], pid.reshape(-1)[keep]
    M, n_prompts = int(num_models), (int(pid.max()) + 1 if pid.size else 0)
    lo = np.full((M, M), np.nan)
    hi = np.full((M, M), np.nan)
    if reps <= 0 or not n_prompts:
        return lo, hi
    # per prompt, the (M, M) sums of preference and counts of comparisons; a replicate is a weighted sum of them
    s = np.zeros((n_prompts, M, M))
    n = np.zeros((n_prompts, M, M))
    np.add.at(s, (pid, a, b), p)
    np.add.at(s, (pid, b, a), 1.0 - p)
    np.add.at(n, (pid, a, b), 1.0)
    np.add.at(n, (pid, b, a), 1.0)
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, n_prompts, size=n_prompts), minlength=n_prompts)
                       for _ in range(int(reps))]).astype(np.float64)  # (reps, P)
    S = np.einsum("rp,pij->rij", counts, s)
    N = np.einsum("rp,pij->rij", counts, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        W = np.where(N > 0, S / np.maximum(N, 1e-300), np.nan)
    q = (1.0 - float(level)) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: pairs never compared
        lo, hi = np.nanquantile(W, [q, 1.0 - q], axis=0)
    lo[np.diag_indices(M)] = hi[np.diag_indices(M)] = np.nan
    return lo, hi


def judge_agreement(p: Any, names: Optional[Sequence[str]] = None, *, tie_tol: float = 0.0) -> dict:
    """Agreement between J judges that rated the same K comparisons; p: (J, K) preferences for side a (NaN =
    that judge did not rate that comparison).

        agreement[i, j] = mean over k with |p_ik - 0.5| > tie_tol and |p_jk - 0.5| > tie_tol of
                          [sign(p_ik - 0.5) == sign(p_jk - 0.5)]      (exact ties ignored)
        correlation[i, j] = Pearson correlation of p_i and p_j over the k both rated
        n[i, j] = number of comparisons entering agreement[i, j]

    Returns {"judges", "agreement", "correlation", "n", "mean_agreement", "mean_correlation"} with nested lists
    (NaN where undefined: no shared decisive comparisons, or a constant judge); the means are over pairs i < j.
    """
    P = np.asarray(p, dtype=np.float64)
    if P.ndim != 2:
        raise ValueError(f"p must be (judges, comparisons), got shape {P.shape}")
    J = P.shape[0]
    names = [f"judge{i}" for i in range(J)] if names is None else [str(x) for x in names]
    if len(names) != J:
        raise ValueError(f"{len(names)} names for {J} judges")
    agree = np.full((J, J), np.nan)
    corr = np.full((J, J), np.nan)
    count = np.zeros((J, J), dtype=np.int64)
    rated = np.isfinite(P)
    side = np.sign(np.where(rated, P, 0.5) - 0.5)
    decisive = rated & (np.abs(np.where(rated, P, 0.5) - 0.5) > tie_tol)
    for i in range(J):
        for j in range(J):
            m = decisive[i] & decisive[j]
            count[i, j] = int(m.sum())
            if m.any():
                agree[i, j] = float(np.mean(side[i, m] == side[j, m]))
            both = rated[i] & rated[j]
            if both.sum() >= 2:
                x, y = P[i, both], P[j, both]
                sx, sy = x.std(), y.std()
                if sx > 0 and sy > 0:
                    corr[i, j] = float(np.mean((x - x.mean()) * (y - y.mean())) / (sx * sy))
    iu = np.triu_indices(J, 1)

    def _mean(m):
        v = m[iu]
        v = v[np.isfinite(v)]
        return float(v.mean()) if v.size else float("nan")

    return {"judges": names, "agreement": agree.tolist(), "correlation": corr.tolist(), "n": count.tolist(),
            "mean_agreement": _mean(agree), "mean_correlation": _mean(corr)}


def _jsonable(x):
    """Nested numpy/float structure -> plain JSON types, non-finite floats -> None (`evals.report.strict_json`,
    with string keys)."""
    from evals.report import strict_json  # noqa: PLC0415 (report plots with matplotlib, loaded only there)

    return strict_json(_str_keys(x))


def _str_keys(x):
    if isinstance(x, Mapping):
        return {str(k): _str_keys(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_str_keys(v) for v in x]
    return x


def _judge_matrix(a, b, p, pid, judge) -> tuple[list, np.ndarray]:
    """Pivot rows (one per judge verdict) into a (J, K) matrix over comparisons keyed by (prompt, {a, b}).

    p is oriented to the lower model index; a judge's several verdicts on one key (e.g. both presentation
    orders) are averaged."""
    lo = np.minimum(a, b)
    hi = np.maximum(a, b)
    p_lo = np.where(a == lo, p, 1.0 - p)
    keys = np.stack([pid, lo, hi], axis=1)
    _, kid = np.unique(keys, axis=0, return_inverse=True)
    kid = kid.reshape(-1)
    jnames, jid = np.unique(np.asarray(judge).reshape(-1), return_inverse=True)
    jid = jid.reshape(-1)
    J, K = len(jnames), int(kid.max()) + 1 if kid.size else 0
    s = np.zeros((J, K))
    n = np.zeros((J, K))
    np.add.at(s, (jid, kid), p_lo)
    np.add.at(n, (jid, kid), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        P = np.where(n > 0, s / np.maximum(n, 1), np.nan)
    return [str(x) for x in jnames.tolist()], P


def rate(comparisons: Mapping[str, Any], names: Sequence[str], *, bootstrap_reps: int = 1000, seed: int = 0,
         hard: bool = False, level: float = 0.95, anchor: Any = 0, anchor_rating: float = 1000.0,
         length_feature_kind: str = "log_ratio", l2: float = 1e-6) -> dict:
    """Everything in one JSON-serialisable dict.

    `comparisons`: arrays of equal length, one row per verdict: "a", "b" (model indices into `names`), "p_a"
    (preference for a, in [0, 1]), "prompt" (prompt id, the bootstrap cluster), "len_a", "len_b" (answer
    lengths, e.g. tokens), optional "judge" (judge name/id per row). With several judges every verdict is a
    comparison for the ratings, and the judges' agreement is reported over comparisons keyed by
    (prompt, unordered model pair). `hard`: turn preferences into win/loss/tie (`hard()`) first. `anchor`: model
    index, model name, or None (mean rating = anchor_rating).

    Returns {"models": [{"name", "elo", "lo", "hi", "lc_elo", "lc_lo", "lc_hi", "n"}, ...] sorted by elo, best
    first, "win_rate": {"names", "matrix", "lo", "hi"} (rows/cols in `names` order, row's mean preference over
    column, with its prompt-bootstrap interval),
    "judge_agreement": judge_agreement(...) dict or None with one judge, "settings": {...}}. Non-finite numbers
    become None. lo/hi are None when bootstrap_reps == 0.
    """
    names = [str(x) for x in names]
    M = len(names)
    a = np.asarray(comparisons["a"], dtype=np.int64).reshape(-1)
    b = np.asarray(comparisons["b"], dtype=np.int64).reshape(-1)
    p_raw = np.asarray(comparisons["p_a"], dtype=np.float64).reshape(-1)
    p = globals()["hard"](p_raw) if hard else p_raw
    prompt = np.asarray(comparisons["prompt"]).reshape(-1)
    len_a = np.asarray(comparisons["len_a"], dtype=np.float64).reshape(-1)
    len_b = np.asarray(comparisons["len_b"], dtype=np.float64).reshape(-1)
    if isinstance(anchor, str):
        anchor = names.index(anchor)
    fkw = dict(anchor=anchor, anchor_rating=anchor_rating, l2=l2)

    elo = fit(a, b, p, M, **fkw)
    lc, beta = length_controlled(a, b, p, len_a, len_b, M, feature=length_feature_kind, return_beta=True, **fkw)
    if bootstrap_reps > 0:
        lo, hi = bootstrap(a, b, p, prompt, M, reps=bootstrap_reps, seed=seed, level=level, **fkw)
        lc_lo, lc_hi = bootstrap(a, b, p, prompt, M, reps=bootstrap_reps, seed=seed, level=level, len_a=len_a,
                                 len_b=len_b, feature=length_feature_kind, **fkw)
    else:
        lo = hi = lc_lo = lc_hi = np.full(M, np.nan)
    n = np.bincount(a[a != b], minlength=M) + np.bincount(b[a != b], minlength=M)

    models = [{"name": names[m], "elo": elo[m], "lo": lo[m], "hi": hi[m], "lc_elo": lc[m], "lc_lo": lc_lo[m],
               "lc_hi": lc_hi[m], "n": int(n[m])} for m in range(M)]
    models.sort(key=lambda d: -d["elo"])

    agreement = None
    judges = None
    if "judge" in comparisons and comparisons["judge"] is not None:
        _, pid = np.unique(prompt, return_inverse=True)
        judges, P = _judge_matrix(a, b, p, pid.reshape(-1), comparisons["judge"])
        if len(judges) > 1:
            agreement = judge_agreement(P, judges)

    settings = {
        "bootstrap_reps": int(bootstrap_reps), "seed": int(seed), "level": float(level), "hard": bool(hard),
        "anchor": None if anchor is None else names[int(anchor)], "anchor_rating": float(anchor_rating),
        "l2": float(l2), "length_feature": length_feature_kind, "length_beta": beta,
        "num_comparisons": int(a.size), "num_prompts": int(np.unique(prompt).size), "num_models": M,
        "judges": judges, "scale": "elo (400 / ln 10 per unit log-odds)",
    }
    wr_lo, wr_hi = win_rate_intervals(a, b, p, prompt, M, reps=bootstrap_reps, seed=seed, level=level)
    return _jsonable({"models": models, "win_rate": {"names": names, "matrix": win_rates(a, b, p, M),
                                                     "lo": wr_lo, "hi": wr_hi},
                      "judge_agreement": agreement, "settings": settings})
