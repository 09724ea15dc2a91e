"""Pairwise verdicts to preferences and win rates: the readout of `Judge.pairwise_batch` (docs/method.md §2).

A group's raw verdicts are vals[a, b, c] = [logit of the first label, logit of the second, log-sum-exp over
the vocabulary] for response a shown first and b second on criterion c (generate mode: [P(first wins), nan,
nan] from the parsed answer). One order's verdict is the softmax over the two labels only,

    p_first(a, b, c) = exp(l1) / (exp(l1) + exp(l2)),

unreadable when the labels hold less than `min_verdict_mass` of the probability, then replaced by what the
other order implies (1 - p_first(b, a, c)); both unreadable -> 1/2. The orders are combined by the mode:
"logit" averages them (`rewards.symmetrize`), "sign" takes the sign of that average (`sign_verdicts`), "hard"
and "generate" average the two orders' argmax verdicts (`hard_verdicts`). Win rates average p over the judged
opponents (`rewards.win_rates`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rubric_jax.judge.common import PairwiseResult
from rubric_jax.judge.readout import enough_mass, label_probs
from rubric_jax.rewards import judge_health as health
from rubric_jax.rewards.compiled import criteria_width, pad_criteria
from rubric_jax.rewards.pairwise import hard_verdicts, sign_verdicts, symmetrize, win_rates

__all__ = ["combine_readings", "fill_orders", "gen_pair_vals", "pair_result", "pooled_result", "pooled_vals", "swiss_standing"]

# the readouts every pairwise result reports a spread for (generate mode has only its parsed verdicts)
READOUTS = {
    "logit": symmetrize,
    "sign": sign_verdicts,
    "hard": lambda f: hard_verdicts(jnp.stack([f, 1.0 - f], -1)),
}


def gen_pair_vals(v: float) -> np.ndarray:
    """Generate-mode verdict index (0 first, 1 second, -1 unreadable) -> [P(first wins), nan, nan]."""
    return np.asarray([{0: 1.0, 1: 0.0}.get(int(v), np.nan), np.nan, np.nan], np.float32)


def fill_orders(p_first: np.ndarray, valid: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """An unreadable order is replaced by what the other order implies (1 - p_first(b, a)); both unreadable,
    or the pair not judged -> 1/2."""
    pt = np.swapaxes(p_first, 0, 1)
    vt = np.swapaxes(valid, 0, 1)
    filled = np.where(valid, p_first, np.where(vt, 1.0 - pt, 0.5))
    return np.where(judged, filled, 0.5).astype(np.float32)


def combine_readings(readings, eps: float = 1e-6) -> np.ndarray:
    """Pools several pairwise readings of the same judged pairs (JudgeConfig.questions="both") into one
    log-odds array z (G, G, C) with z[a, b] = -z[b, a]:

        s_k(a, b) = (f_k(a, b) + 1 - f_k(b, a)) / 2       reading k's both-orders P(a beats b)
        s_k       -> 1 - s_k                               when reading k asks for the worse response
        z(a, b)   = sum_k w_k * logit(clip(s_k, eps, 1 - eps))

    with f_k the reading's filled per-order probabilities (`fill_orders`). Each reading cancels its own
    position preference before pooling, and an unreadable pair (both orders) adds logit(1/2) = 0. With two
    readings this is a weighted product of experts; w_k is best set inversely to each reading's log-odds
    spread, so that neither reading drowns the other (docs/method.md, "Judge fidelity").

    readings: [(p_first (G, G, C), valid (G, G, C) bool, judged (G, G, C) bool, invert: bool, weight)].
    """
    z = None
    for p_first, valid, judged, invert, weight in readings:
        f = fill_orders(np.asarray(p_first, np.float32), np.asarray(valid), np.asarray(judged)).astype(np.float64)
        s = 0.5 * (f + 1.0 - np.swapaxes(f, 0, 1))
        if invert:
            s = 1.0 - s
        s = np.clip(s, eps, 1.0 - eps)
        term = float(weight) * np.log(s / (1.0 - s))
        z = term if z is None else z + term
    return z


def pooled_vals(z: np.ndarray) -> np.ndarray:
    """Verdict values (G, G, C, 3) whose per-order readout (`pair_result`) is sigmoid(z) with all probability
    on the two labels: [z, 0, log(1 + e^z)]."""
    z = np.asarray(z, np.float64)
    return np.stack([z, np.zeros_like(z), np.logaddexp(z, 0.0)], -1).astype(np.float32)


def pooled_result(readings, mode: str) -> PairwiseResult:
    """One group's result from several readings of it, [(PairwiseResult in logit mode, invert, weight)]: the
    pooled verdicts (`combine_readings`) read out by `mode`. The pooled verdict is the same in both orders by
    construction, so the health figures describe the readings: per order, P(first wins) is each reading's own
    (inverted for the worse question) averaged, which is where a position preference shows (the fidelity
    study's first_win); unreadable verdicts, entropy and order agreement are the readings' mean."""
    first = readings[0][0]
    g, _, c = first.p_first.shape
    judged = np.broadcast_to(first.mask[:, :, None], (g, g, c))
    z = combine_readings([(r.p_first, r.valid, judged, invert, w) for r, invert, w in readings])
    res = pair_result(dict(g=g, c=c, vals=pooled_vals(z), mask=first.mask), mode, 0.0)
    for k in ("invalid_fraction", "verdict_entropy", "order_agreement"):
        res.metrics[k] = float(np.mean([r.metrics[k] for r, _, _ in readings]))
    valid = np.logical_and.reduce([r.valid for r, _, _ in readings])
    p_first = np.mean([1.0 - r.p_first if invert else r.p_first for r, invert, _ in readings], axis=0)
    seen = valid & judged
    res.metrics["position_bias"] = float(p_first[seen].mean()) if seen.any() else 0.5
    res.metrics["first_position_rate"] = float(health.first_position_rate_flat(p_first[seen]))
    return dataclasses.replace(res, valid=valid, p_first=p_first.astype(np.float32))


def pair_result(gr: dict, mode: str, min_mass: float) -> PairwiseResult:
    """One group's result from gr = {"g", "c", "vals" (G, G, C, 3), "mask" (G, G) judged pairs}."""
    g, c = gr["g"], gr["c"]
    vals, mask = gr["vals"], gr["mask"]
    judged = np.broadcast_to(mask[:, :, None], (g, g, c))
    if mode == "generate":
        p_first = vals[..., 0]
        valid = judged & ~np.isnan(p_first)
    else:
        p, log_mass = label_probs(vals[..., :2], vals[..., 2])
        p_first = p[..., 0].astype(np.float32)
        valid = judged & np.isfinite(p_first) & enough_mass(log_mass, min_mass)
    p_first = np.where(judged, p_first, np.nan).astype(np.float32)
    filled = fill_orders(p_first, valid, judged)
    keep = judged | np.eye(g, dtype=bool)[:, :, None]
    # Every readout of the same verdicts, computed once: the chosen one is the result, and the in-group spread
    # each would give (std over the G win rates, mean over criteria; it scales dr_grpo's advantages) is logged
    # to choose the mode on. Generate mode has parsed verdicts only: its readout is "hard".
    names = ("hard",) if mode == "generate" else tuple(READOUTS)
    pf0 = np.where(valid, p_first, 0.0).astype(np.float32)
    # padded criteria are neither judged nor valid, so no figure counts them; their columns are cut off
    width = criteria_width(c)
    ps, ws, figures = _readouts(pad_criteria(filled, width, 0.5), pad_criteria(keep, width, True), mask,
                                pad_criteria(pf0, width, 0.0), pad_criteria(valid, width, False),
                                pad_criteria(judged, width, False), names=names)
    ps = {n: np.asarray(v)[..., :c] for n, v in ps.items()}
    ws = {n: np.asarray(v)[..., :c] for n, v in ws.items()}
    chosen = "hard" if mode == "generate" else mode
    spreads = {} if mode == "generate" else {f"spread_{n}": float(w.std(axis=0).mean()) for n, w in ws.items()}
    metrics = {"judgments": float(judged.sum()), **{k: float(v) for k, v in figures.items()}, **spreads}
    return PairwiseResult(p=ps[chosen], p_first=p_first, valid=valid, mask=mask.copy(), win_rates=ws[chosen],
                          metrics=metrics)


@functools.partial(jax.jit, static_argnames=("names",))
def _readouts(filled, keep, mask, pf0, valid, judged, *, names):
    """The array math of `pair_result` as one program per (G, padded C, mode): run op by op it was some fifty
    small programs, compiled again for every new criterion count (each curriculum step) and in every process.
    `judged` (G, G, C) is the pair mask of the real criteria: the figures count nothing else."""
    ps = {n: jnp.where(keep, READOUTS[n](filled), 0.5).astype(jnp.float32) for n in names}
    ws = {n: win_rates(p, mask) for n, p in ps.items()}
    figures = {
        # valid implies judged: the flat means over valid entries are the means over valid judged pairs
        "position_bias": health.position_bias_flat(pf0.ravel(), valid.ravel()),
        "first_position_rate": health.first_position_rate_flat(pf0.ravel(), valid.ravel()),
        "invalid_fraction": health.invalid_fraction(valid, judged),
        "verdict_entropy": health.verdict_entropy(jnp.stack([pf0, 1.0 - pf0], -1), valid),
        "order_agreement": health.order_agreement(filled, judged),
    }
    return ps, ws, figures


def swiss_standing(gr: dict, mode: str) -> np.ndarray:
    """Current Swiss standing of each response: mean over judged opponents and criteria of p(i > j)."""
    g = gr["g"]
    if not gr["mask"].any():
        return np.zeros(g)
    vals = gr["vals"]
    if mode == "generate":
        pf = vals[..., 0]
    else:
        lg = vals[..., :2].astype(np.float64)
        pf = 1.0 / (1.0 + np.exp(lg[..., 1] - lg[..., 0]))
    pf = np.where(np.isnan(pf), 0.5, pf)
    p = np.asarray(symmetrize(jnp.asarray(pf)))
    return np.asarray(win_rates(jnp.asarray(p), jnp.asarray(gr["mask"]))).mean(-1)
