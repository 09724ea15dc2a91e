"""Judge health metrics, logged next to the rewards to catch a judge that drifts or breaks.

The self-judge is the frozen base model (docs/method.md), so its failure modes are known
ones: a preference for whichever response comes first (the RcRL paper judges both orders and averages
to cancel it; its evaluation protocols, appendix D, randomise order for the same reason),
unparseable verdicts or scores (RARE: invalid -> marked invalid, docs/method.md), and verdicts
that collapse to certainty or to coin flips.

All functions are pure jnp, jit-able and vmappable; each returns a scalar.
"""

from __future__ import annotations

import jax.numpy as jnp


def _as_float(x) -> jnp.ndarray:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def _pair_mask(g: int, pair_mask_gg, ndim: int) -> jnp.ndarray:
    off = ~jnp.eye(g, dtype=bool)
    m = off if pair_mask_gg is None else jnp.asarray(pair_mask_gg, dtype=bool)
    m = (m | jnp.swapaxes(m, 0, 1)) & off.reshape((g, g) + (1,) * (m.ndim - 2))
    return m.reshape(m.shape + (1,) * (ndim - m.ndim))


def position_bias(p_first_ggc: jnp.ndarray, pair_mask_gg: jnp.ndarray | None = None) -> jnp.ndarray:
    """Mean probability that the FIRST-presented response wins, over judged ordered pairs.

        bias = mean_{(a, b) judged, a != b, c} p_first[a, b, c]

    p_first_ggc[a, b, c] as in `pairwise.symmetrize` ((G, G) or (G, G, C)); the diagonal is
    never used. 0.5 means no position preference; above 0.5 favours the first slot. Since every
    unordered pair is judged in both orders, a judge with no position preference averages 0.5
    whatever the quality differences. Returns a scalar (0.5 if nothing was judged).
    """
    p = _as_float(p_first_ggc)
    m = jnp.broadcast_to(_pair_mask(p.shape[0], pair_mask_gg, p.ndim), p.shape)
    n = jnp.sum(m)
    return jnp.where(n > 0, jnp.sum(jnp.where(m, p, 0.0)) / jnp.maximum(n, 1), 0.5)


def position_bias_flat(p_first_n: jnp.ndarray, valid_n: jnp.ndarray | None = None) -> jnp.ndarray:
    """`position_bias` for a flat list of judgments: mean of P(first wins) over valid entries."""
    p = _as_float(p_first_n)
    v = jnp.ones(p.shape, dtype=bool) if valid_n is None else jnp.asarray(valid_n, dtype=bool)
    n = jnp.sum(v)
    return jnp.where(n > 0, jnp.sum(jnp.where(v, p, 0.0)) / jnp.maximum(n, 1), 0.5)


def first_position_rate_flat(p_first_n: jnp.ndarray, valid_n: jnp.ndarray | None = None) -> jnp.ndarray:
    """Share of valid verdicts that pick the first-presented response (P(first) > 1/2; exactly 1/2 counts
    half). Every pair is judged in both orders, so a judge without a position preference scores 1/2 whatever
    the responses' quality: the rate is the audit's discrete reading of `position_bias` (0.5 if none valid)."""
    p = _as_float(p_first_n)
    v = jnp.ones(p.shape, dtype=bool) if valid_n is None else jnp.asarray(valid_n, dtype=bool)
    pick = jnp.where(p > 0.5, 1.0, jnp.where(p == 0.5, 0.5, 0.0))
    n = jnp.sum(v)
    return jnp.where(n > 0, jnp.sum(jnp.where(v, pick, 0.0)) / jnp.maximum(n, 1), 0.5)


def saturation(s_gc: jnp.ndarray, valid_gc: jnp.ndarray, max_c: jnp.ndarray) -> jnp.ndarray:
    """Share of valid pointwise scores at the top of their criterion's scale (the score rounds to m_c): a
    criterion every rollout maxes out gives no within-group signal (RARE replaces such criteria). 0 if none
    valid."""
    s = _as_float(s_gc)
    top = jnp.round(s) >= jnp.asarray(max_c, s.dtype)
    v = jnp.asarray(valid_gc, bool)
    n = jnp.sum(v)
    return jnp.where(n > 0, jnp.sum(top & v) / jnp.maximum(n, 1), 0.0)


def order_agreement(p_first_ggc: jnp.ndarray, pair_mask_gg: jnp.ndarray | None = None) -> jnp.ndarray:
    """Fraction of judged pairs whose two presentation orders name the same winner.

    For a pair (i, j): order 1 picks i when p_first[i, j] > 0.5; order 2 picks i when
    p_first[j, i] < 0.5. The pair agrees when both pick the same rollout (exact 0.5 counts as
    no pick and disagrees). Hard-mode verdicts are 0.5 exactly on the disagreeing pairs.
    Returns a scalar in [0, 1] (1.0 if nothing was judged).
    """
    p = _as_float(p_first_ggc)
    pt = jnp.swapaxes(p, 0, 1)
    agree = ((p > 0.5) & (pt < 0.5)) | ((p < 0.5) & (pt > 0.5))
    m = jnp.broadcast_to(_pair_mask(p.shape[0], pair_mask_gg, p.ndim), p.shape)
    n = jnp.sum(m)
    return jnp.where(n > 0, jnp.sum(m & agree) / jnp.maximum(n, 1), 1.0)


def invalid_fraction(valid: jnp.ndarray, counted: jnp.ndarray | None = None) -> jnp.ndarray:
    """Fraction of judge outputs that could not be read as a verdict or score: 1 - mean(valid).

    counted (valid's shape): which entries are judge outputs at all (e.g. the judged pairs of a pairwise
    group); the mean is over those, and 0 when there are none."""
    v = jnp.asarray(valid, dtype=bool)
    if counted is None:
        return 1.0 - jnp.mean(v.astype(jnp.float32))
    m = jnp.asarray(counted, dtype=bool)
    n = jnp.sum(m)
    return jnp.where(n > 0, 1.0 - jnp.sum(v & m) / jnp.maximum(n, 1), 0.0)


def verdict_entropy(probs_nk: jnp.ndarray, valid_n: jnp.ndarray | None = None) -> jnp.ndarray:
    """Mean entropy (nats) of the judge's verdict distributions over the last axis (K options).

        H = mean_n ( - sum_k p_nk log p_nk ),   with 0 log 0 = 0

    K = 2 for pairwise verdicts (e.g. ``stack([p_first, 1 - p_first], -1)``), K = m + 1 for
    pointwise digit scores. Near 0: the judge is always certain (possibly collapsed); near log K:
    it is guessing. Rows are renormalised to sum to 1. valid_n (shape probs.shape[:-1]) excludes
    unreadable outputs. Returns a scalar (0 if nothing is valid).
    """
    p = _as_float(probs_nk)
    p = p / jnp.maximum(jnp.sum(p, axis=-1, keepdims=True), 1e-30)
    plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)
    h = -jnp.sum(plogp, axis=-1)
    v = jnp.ones(h.shape, dtype=bool) if valid_n is None else jnp.asarray(valid_n, dtype=bool)
    n = jnp.sum(v)
    return jnp.where(n > 0, jnp.sum(jnp.where(v, h, 0.0)) / jnp.maximum(n, 1), 0.0)


# ---------------------------------------------------------------------------------------------
# Fidelity against a program (the judge's verdicts where IFEval's checkers also decide; logged only)


def pointwise_program_agreement(judge_pass_gk, program_pass_gk, decided_gk=None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Per criterion k: (agreeing verdicts, verdicts compared), both (K,).

        agree_k = sum_g [judge_pass_gk == program_pass_gk] * d_gk,   n_k = sum_g d_gk

    judge_pass_gk, program_pass_gk: (G, K) booleans (the judge's met / not met, the program's keeps / breaks);
    decided_gk: (G, K) which entries both decided (default all). Counts, not a ratio, so that groups and
    processes pool by summing before the share agree / n is taken."""
    j = jnp.asarray(judge_pass_gk, dtype=bool)
    p = jnp.asarray(program_pass_gk, dtype=bool)
    d = jnp.ones(j.shape, dtype=bool) if decided_gk is None else jnp.asarray(decided_gk, dtype=bool)
    return jnp.sum((j == p) & d, axis=0), jnp.sum(d, axis=0)


def pairwise_program_agreement(p_ggk, pair_mask_gg, program_pass_gk, decided_k=None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Per criterion k: (program-decided pairs the judge orders the same way, program-decided pairs), both (K,).

    A judged pair {i, j} is program-decided on k when the program says one keeps criterion k and the other
    breaks it; the judge orders it the same way when p_k(keeper > breaker) > 1/2 (a tie, exactly 1/2, counts as
    not the same way). Each unordered pair counts once:

        agree_k = sum_{i<j, m_ij, v_ik != v_jk} [p_ijk > 1/2 if v_ik else p_ijk < 1/2],   n_k = sum of the same pairs

    p_ggk: (G, G, K) p_k(i beats j) (`PairwiseResult.p`); pair_mask_gg: (G, G) judged pairs; program_pass_gk:
    (G, K) booleans; decided_k: (K,) criteria the program checks at all (default all)."""
    p = _as_float(p_ggk)
    v = jnp.asarray(program_pass_gk, dtype=bool)
    g = p.shape[0]
    upper = jnp.triu(jnp.ones((g, g), dtype=bool), k=1) & jnp.asarray(pair_mask_gg, dtype=bool)
    split = v[:, None, :] != v[None, :, :]  # (G, G, K): one keeps, the other breaks
    counted = upper[:, :, None] & split
    if decided_k is not None:
        counted = counted & jnp.asarray(decided_k, dtype=bool)[None, None, :]
    same = jnp.where(v[:, None, :], p > 0.5, p < 0.5)  # i is the keeper: i must win; else j must
    return jnp.sum(counted & same, axis=(0, 1)), jnp.sum(counted, axis=(0, 1))
