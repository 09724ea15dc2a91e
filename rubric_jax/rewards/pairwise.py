"""Pairwise self-judging: verdict matrices, win rates and the pairwise reward (RcRL).

Math: docs/method.md (RcRL). Source: "Rubric Curriculum RL: Exploiting the Generation-Verification Gap
in Non-Verifiable Domains" (the RcRL paper), section 3 and Table 3 ("Pairwise RaR", "RcRL").

Conventions (G rollouts of one prompt, C criteria):
  p_first_ggc[a, b, c]  probability that the judge picks the FIRST-presented response when rollout
                        a is shown first and rollout b second, for criterion c.
  p_ggc[i, j, c]        symmetrised p_c(i > j): probability that i beats j, order-averaged, so that
                        p[i, j] + p[j, i] = 1 exactly. The diagonal is 0.5 and is never used.
  pair_mask_gg[i, j]    True where the pair (i, j) was judged. The mask is symmetrised (a judged pair
                        gives both p[i, j] and p[j, i]) and its diagonal ignored.
All functions are pure jnp, jit-able, and vmap over a leading prompt axis B.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def _offdiag(g: int) -> jnp.ndarray:
    return ~jnp.eye(g, dtype=bool)


def first_win_probs(verdict_logits_gg2: jnp.ndarray) -> jnp.ndarray:
    """P(first wins) from the judge's two verdict-token logits.

    verdict_logits[..., 0] is the logit of the token meaning "first response wins",
    verdict_logits[..., 1] that of "second response wins"; the result is softmax(...)[..., 0]
    = sigmoid(l0 - l1) (logit mode, docs/method.md). Any leading shape (e.g. (G, G, C, 2)).
    """
    l = jnp.asarray(verdict_logits_gg2)
    return 1.0 / (1.0 + jnp.exp(l[..., 1] - l[..., 0]))


def symmetrize(p_first_ggc: jnp.ndarray) -> jnp.ndarray:
    """Order-averaged pairwise probabilities from a matrix of first-position win probabilities.

        p(i > j) = ( P(first wins | i first, j second) + P(second wins | j first, i second) ) / 2
                 = ( p_first[i, j] + 1 - p_first[j, i] ) / 2

    (docs/method.md, logit mode; the RcRL paper judges both presentation orders.) The result
    satisfies p + p^T = 1 exactly, which makes group-mean win rates exactly 1/2. The diagonal is
    set to 0.5. Input (G, G) or (G, G, C); output the same shape.
    """
    p = jnp.asarray(p_first_ggc)
    p = p if jnp.issubdtype(p.dtype, jnp.floating) else p.astype(jnp.float32)
    # t[i, j] = -t[j, i] bit for bit; the winner of each pair gets u = 1/2 + |t| >= 1/2 and the
    # loser 1 - u, which is exact in floating point, so p + p^T == 1 holds without rounding.
    t = 0.5 * (p - jnp.swapaxes(p, 0, 1))
    u = 0.5 + jnp.abs(t)
    out = jnp.where(t >= 0, u, 1.0 - u)
    g = p.shape[0]
    diag = jnp.eye(g, dtype=bool).reshape((g, g) + (1,) * (p.ndim - 2))
    return jnp.where(diag, jnp.asarray(0.5, out.dtype), out)


def hard_verdicts(verdict_scores_gg2: jnp.ndarray) -> jnp.ndarray:
    """Hard-mode pairwise outcomes: argmax verdict in each presentation order, then averaged.

    verdict_scores[a, b, ..., 0] scores "first wins" and [..., 1] scores "second wins" when a is
    shown first and b second (logits, probabilities, or any strictly increasing function of them:
    only their comparison is used). With h_first[a, b] = 1 if score0 > score1, 0 if score0 <
    score1 and 0.5 on an exact tie,

        p_hard(i > j) = ( h_first[i, j] + 1 - h_first[j, i] ) / 2

    which is 1 when both orders prefer i, 0 when both prefer j, and 0.5 when the orders disagree
    (docs/method.md, hard mode). Output (G, G) or (G, G, C), with p + p^T = 1.

    To use a matrix of first-position probabilities p_first, pass
    ``jnp.stack([p_first, 1 - p_first], -1)``.
    """
    s = jnp.asarray(verdict_scores_gg2)
    s0, s1 = s[..., 0], s[..., 1]
    h = jnp.where(s0 > s1, 1.0, jnp.where(s0 < s1, 0.0, 0.5)).astype(jnp.result_type(float))
    return symmetrize(h)


def sign_verdicts(p_first_ggc: jnp.ndarray) -> jnp.ndarray:
    """Discrete pairwise outcomes read from the order-averaged probability ("sign" mode).

        p_sign(i > j) = 1   if p(i > j) > 1/2
                        0   if p(i > j) < 1/2
                        1/2 if p(i > j) = 1/2,   with p = symmetrize(p_first)

    i.e. the sign of p_first[i, j] - p_first[j, i]. Hard mode takes each order's argmax before averaging, so
    a judge whose position preference outweighs its content preference (every order names the first
    response) ties every pair; here the position preference cancels in the average first, and the verdict is
    then made discrete like hard mode's. Its accuracy on a pair is the logit mode's (the same comparison with
    1/2) and its win rates are multiples of 1/(2(G-1)), as with a judge that answers with a token (the RcRL
    paper's vLLM judge, section 3), instead of soft values near 1/2. Output (G, G) or (G, G, C), p + p^T = 1.
    """
    p = symmetrize(p_first_ggc)
    return jnp.where(p > 0.5, 1.0, jnp.where(p < 0.5, 0.0, 0.5)).astype(p.dtype)


def win_rates(p_ggc: jnp.ndarray, pair_mask_gg: jnp.ndarray | None = None) -> jnp.ndarray:
    """Per-criterion win rates over the judged opponents.

        w[i, c] = sum_{j != i} m[i, j] p[i, j, c] / sum_{j != i} m[i, j]

    with m the (symmetrised) pair mask; m = all pairs gives the RcRL formula
    w_ic = 1/(G-1) sum_{j != i} p_c(i > j) (docs/method.md). A rollout with no judged
    opponent (or G = 1) gets w = 0.5, the neutral value. With all pairs (or any regular pairing,
    e.g. circular) and p + p^T = 1, mean_i w[i, c] = 1/2 exactly.

    p_ggc: (G, G, C) or (G, G); pair_mask_gg: (G, G) bool, or (G, G, C) for per-criterion masks.
    Returns (G, C) (or (G,)).
    """
    p = jnp.asarray(p_ggc)
    g = p.shape[0]
    if pair_mask_gg is None:
        m = _offdiag(g)
    else:
        m = jnp.asarray(pair_mask_gg, dtype=bool)
        m = (m | jnp.swapaxes(m, 0, 1)) & _offdiag(g).reshape((g, g) + (1,) * (m.ndim - 2))
    m = jnp.broadcast_to(m.reshape(m.shape + (1,) * (p.ndim - m.ndim)), p.shape)
    num = jnp.sum(jnp.where(m, p, 0.0), axis=1)
    den = jnp.sum(m, axis=1).astype(num.dtype)
    return jnp.where(den > 0, num / jnp.maximum(den, 1.0), 0.5)


def pairwise_reward(w_gc: jnp.ndarray, lambda_c: jnp.ndarray) -> jnp.ndarray:
    """RcRL reward r_i = sum_c lambda_c w_ic (docs/method.md).

    lambda_c comes from `curriculum_weights` (zero for inactive criteria) or `all_active_weights`
    (Pairwise RaR, Table 3 of the RcRL paper). Works on (..., G, C) with lambda (C,) or (..., C).
    """
    w = jnp.asarray(w_gc)
    lam = jnp.asarray(lambda_c, dtype=w.dtype)
    return jnp.einsum("...gc,...c->...g", w, lam)


# ---- which pairs to judge ---------------------------------------------------------------------


def all_pairs_mask(g: int) -> np.ndarray:
    """All ordered pairs i != j: G(G-1) judgments per criterion (docs/method.md, cost)."""
    return ~np.eye(g, dtype=bool)


def circular_pairs_mask(g: int, k: int = 1) -> np.ndarray:
    """Each rollout meets its k successors and k predecessors on a ring (degree min(2k, G-1)).

    A regular pairing: every rollout has the same number of judged opponents, so the group-mean
    win rate stays exactly 1/2 while only about G*k unordered pairs are judged.
    """
    m = np.zeros((g, g), dtype=bool)
    idx = np.arange(g)
    for d in range(1, k + 1):
        m[idx, (idx + d) % g] = True
    m = m | m.T
    np.fill_diagonal(m, False)
    return m


def pairs_from_mask(mask_gg: np.ndarray) -> np.ndarray:
    """Unordered judged pairs (i < j) of a mask as an int array (P, 2) - the judge's work list.

    Each pair is judged in both presentation orders, i.e. 2P judge calls per criterion.
    """
    m = np.asarray(mask_gg, dtype=bool)
    m = m | m.T
    i, j = np.nonzero(np.triu(m, k=1))
    return np.stack([i, j], axis=-1).astype(np.int32)


def mask_from_pairs(pairs_p2: np.ndarray, g: int) -> np.ndarray:
    """Inverse of `pairs_from_mask`: symmetric (G, G) mask from a list of (i, j) pairs.

    Use it for any external pairing schedule (e.g. Swiss rounds) before `win_rates`.
    """
    m = np.zeros((g, g), dtype=bool)
    pairs = np.asarray(pairs_p2, dtype=np.int64).reshape(-1, 2)
    m[pairs[:, 0], pairs[:, 1]] = True
    m = m | m.T
    np.fill_diagonal(m, False)
    return m
