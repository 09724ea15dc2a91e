"""Exploration and usefulness bonuses, the optional RcRL add-ons (docs/method.md).

Source: "Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable Domains"
(the RcRL paper), appendix B (B.1 representation-based exploration, B.2 usefulness, B.3 normalisation
and combination) and Table 3 ("+ Exploration Bonus", "+ Exploration & Usefulness").

Per group of G rollouts: hidden features h_gd (d = projected dimension) and per-token negative
log-likelihoods. Everything is pure jnp, jit-able and vmaps over a leading prompt axis B.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from rubric_jax.rewards.group import standardise_in_group


def mean_pool(hidden_gtd: jnp.ndarray, mask_gt: jnp.ndarray) -> jnp.ndarray:
    """Masked mean over time of final hidden states: (G, T, D), (G, T) -> (G, D).

    mask_gt marks the completion tokens of each rollout; an all-zero mask gives a zero vector.
    """
    h = jnp.asarray(hidden_gtd)
    m = jnp.asarray(mask_gt, dtype=h.dtype)
    num = jnp.einsum("...td,...t->...d", h, m)
    den = jnp.sum(m, axis=-1, keepdims=True)
    return num / jnp.maximum(den, 1.0)


def random_projection(key: jax.Array, d_in: int, d_out: int) -> jnp.ndarray:
    """A fixed Gaussian projection matrix (D, d) with entries N(0, 1/d): h_gd = pooled_gD @ P.

    Keep the key fixed over training so bonuses at different steps live in the same space.
    """
    return jax.random.normal(key, (d_in, d_out), dtype=jnp.float32) / jnp.sqrt(float(d_out))


def exploration_bonus(h_gd: jnp.ndarray, lam: float) -> jnp.ndarray:
    """Leverage-score exploration bonus (RepExp; RcRL paper appendix B.1, docs/method.md):

        b_i = sqrt( h_i^T (sum_j h_j h_j^T + lam I_d)^-1 h_i )

    The sum runs over all G rollouts of the group, i included. A rollout whose representation
    points where the others do not scores high; one inside the span of many others scores low.
    Always in [0, 1) for lam > 0. Computed in the smaller of the two equivalent forms:
    d x d (as written) when d <= G, else the G x G kernel form
    diag(K (K + lam I_G)^-1) with K = H H^T (push-through identity). lam must be > 0.

    h_gd: (G, d). Returns (G,).
    """
    h = jnp.asarray(h_gd)
    h = h if jnp.issubdtype(h.dtype, jnp.floating) else h.astype(jnp.float32)
    g, d = h.shape[-2], h.shape[-1]
    if d <= g:
        m = jnp.einsum("gd,ge->de", h, h) + lam * jnp.eye(d, dtype=h.dtype)
        sol = jsl.cho_solve(jsl.cho_factor(m, lower=True), h.T)  # (d, G)
        lev = jnp.einsum("gd,dg->g", h, sol)
    else:
        k = h @ h.T
        sol = jsl.cho_solve(jsl.cho_factor(k + lam * jnp.eye(g, dtype=h.dtype), lower=True), k)
        lev = jnp.diagonal(sol)
    return jnp.sqrt(jnp.clip(lev, 0.0, None))


def usefulness_bonus(nll_plain_g: jnp.ndarray, nll_with_example_gg: jnp.ndarray) -> jnp.ndarray:
    """In-context usefulness bonus (RcRL paper appendix B.2, docs/method.md):

        u_i = mean_{j != i} [ NLL(y_j | x) - NLL(y_j | x, y_i shown as an example) ]

    nll_plain_g[j]           per-token NLL of rollout j given the prompt alone, (G,).
    nll_with_example_gg[i, j] per-token NLL of rollout j when rollout i is shown as an example
                             before it, (G, G); the diagonal is ignored.
    A rollout that makes its siblings easier to predict scores high. G = 1 gives 0. Returns (G,).
    """
    plain = jnp.asarray(nll_plain_g)
    plain = plain if jnp.issubdtype(plain.dtype, jnp.floating) else plain.astype(jnp.float32)
    withx = jnp.asarray(nll_with_example_gg, dtype=plain.dtype)
    g = plain.shape[-1]
    gain = plain[..., None, :] - withx  # [i, j]
    off = ~jnp.eye(g, dtype=bool)
    return jnp.sum(jnp.where(off, gain, 0.0), axis=-1) / max(g - 1, 1)


def add_bonuses(
    r_g: jnp.ndarray,
    bonuses: Sequence[jnp.ndarray],
    coefs: Sequence[float],
    eps: float = 1e-6,
) -> jnp.ndarray:
    """r_i + sum_k coef_k * standardise_in_group(bonus_k)_i (docs/method.md).

    Each bonus is standardised within its group (last axis) before mixing, so the coefficients
    are on a common scale; a bonus that is constant over the group adds nothing.
    """
    if len(bonuses) != len(coefs):
        raise ValueError(f"got {len(bonuses)} bonuses but {len(coefs)} coefficients")
    r = jnp.asarray(r_g)
    r = r if jnp.issubdtype(r.dtype, jnp.floating) else r.astype(jnp.float32)
    for b, c in zip(bonuses, coefs):
        r = r + c * standardise_in_group(b, eps=eps)
    return r
