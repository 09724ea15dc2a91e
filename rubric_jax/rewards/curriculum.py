"""Criterion schedules: the RcRL curriculum, its ablations, and criterion dropout.

Math: docs/method.md (RcRL). Source: "Rubric Curriculum RL: Exploiting the Generation-Verification Gap
in Non-Verifiable Domains" (the RcRL paper): the curriculum in section 3, the ablations "Weighting",
"Ordering 1-3", "Dropout Absolute RaR" and the all-active RaR baselines of Table 3, the intervals
of Table 6 (creative writing: 100 steps) and appendix C.4 (HealthBench: 50 steps).

Criteria are listed in curriculum order c_1..c_C (position k = 0..C-1). Every function returns
per-criterion weights lambda_c of shape (C,) that feed `pairwise_reward` / `absolute_reward`.
`step` (and `interval`) may be Python ints or traced jnp scalars, so the schedule can sit inside
jit; C and `mode` are static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

CURRICULUM_MODES = ("emphasis", "equal")


def num_active(step, num_criteria: int, interval: int) -> jnp.ndarray:
    """Number of active criteria K(t) = min(C, 1 + floor(t / interval)) (docs/method.md).

    Never below 1 (a negative step still trains on the first criterion). Returns int32 scalar.
    """
    step = jnp.asarray(step, dtype=jnp.int32)
    k = 1 + jnp.floor_divide(step, jnp.asarray(interval, dtype=jnp.int32))
    return jnp.clip(k, 1, num_criteria).astype(jnp.int32)


def introduction_steps(num_criteria: int, interval: int) -> np.ndarray:
    """Step at which each curriculum position becomes active: k * interval (RcRL paper, Tables 7 and 8)."""
    return np.arange(num_criteria, dtype=np.int64) * interval


def active_mask(step, num_criteria: int, interval: int) -> jnp.ndarray:
    """bool[C]: True for the first K(t) positions of the curriculum."""
    return jnp.arange(num_criteria) < num_active(step, num_criteria, interval)


def _place(w_k: jnp.ndarray, order) -> jnp.ndarray:
    """Map weights per curriculum position k onto criteria: lambda[order[k]] = w[k]."""
    if order is None:
        return w_k
    order = jnp.asarray(order, dtype=jnp.int32)
    return jnp.zeros_like(w_k).at[order].set(w_k)


def curriculum_weights(
    step, num_criteria: int, interval: int, alpha: float = 0.5, mode: str = "emphasis", order=None
) -> jnp.ndarray:
    """Curriculum weights lambda_c(t), summing to 1 over the K(t) active criteria.

    mode="emphasis" (RcRL, docs/method.md):
        lambda_newest = alpha, every other active criterion (1 - alpha) / (K - 1), inactive 0;
        K = 1 gives lambda = 1 on the only active criterion.
    mode="equal" (the "Weighting" ablation, RcRL paper Table 3): lambda = 1 / K on active criteria.

    order: optional permutation (e.g. `permute_order`) mapping curriculum position k to the
    criterion index order[k] of the rubric (the "Ordering 1-3" ablations). Without it the rubric
    order is the curriculum order. Returns float32[C].
    """
    if mode not in CURRICULUM_MODES:
        raise ValueError(f"mode must be one of {CURRICULUM_MODES}, got {mode!r}")
    k = num_active(step, num_criteria, interval)
    pos = jnp.arange(num_criteria)
    active = pos < k
    kf = k.astype(jnp.float32)
    if mode == "equal":
        w = jnp.where(active, 1.0 / kf, 0.0)
    else:
        alpha = jnp.asarray(alpha, dtype=jnp.float32)
        newest = pos == k - 1
        others = (1.0 - alpha) / jnp.maximum(kf - 1.0, 1.0)
        w_multi = jnp.where(newest, alpha, jnp.where(active, others, 0.0))
        w_single = jnp.where(newest, 1.0, 0.0)
        w = jnp.where(k == 1, w_single, w_multi)
    return _place(w.astype(jnp.float32), order)


def all_active_weights(num_criteria: int) -> jnp.ndarray:
    """Equal weights 1/C on every criterion from step 0 (Absolute / Pairwise RaR, RcRL paper Table 3)."""
    return jnp.full((num_criteria,), 1.0 / num_criteria, dtype=jnp.float32)


def weights_from_mask(mask_c: jnp.ndarray) -> jnp.ndarray:
    """Equal weights over the True entries of a bool[C] mask; all zeros if the mask is empty."""
    m = jnp.asarray(mask_c, dtype=bool)
    n = jnp.sum(m).astype(jnp.float32)
    return jnp.where(m, 1.0 / jnp.maximum(n, 1.0), 0.0).astype(jnp.float32)


def permute_order(num_criteria: int, seed: int) -> np.ndarray:
    """A seeded random curriculum order (int32[C] permutation) for the Ordering ablations.

    Deterministic in (num_criteria, seed). Use it as `order=` of `curriculum_weights`, or reorder
    the rubric itself with `Rubric.reordered(order)`.
    """
    return np.random.default_rng(seed).permutation(num_criteria).astype(np.int32)


def dropout_mask(key: jax.Array, num_criteria: int, q: float) -> jnp.ndarray:
    """Criterion dropout (Dropout Absolute RaR, RcRL paper Table 3; docs/method.md).

    Each criterion is dropped independently with probability q. If every criterion would be
    dropped, one criterion chosen uniformly at random is kept, so the mask is never empty.
    Returns bool[C]; a fresh key per training step gives a non-stationary objective.
    """
    k_keep, k_fallback = jax.random.split(key)
    keep = jax.random.bernoulli(k_keep, 1.0 - jnp.asarray(q, jnp.float32), (num_criteria,))
    fallback = jax.random.randint(k_fallback, (), 0, num_criteria)
    rescue = (~jnp.any(keep)) & (jnp.arange(num_criteria) == fallback)
    return keep | rescue


def dropout_weights(key: jax.Array, num_criteria: int, q: float) -> jnp.ndarray:
    """Equal weights over the criteria kept by `dropout_mask` (sum to 1)."""
    return weights_from_mask(dropout_mask(key, num_criteria, q))
