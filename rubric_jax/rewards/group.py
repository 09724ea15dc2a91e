"""Group-relative advantages and group filtering (docs/method.md: GRPO, RLMR).

Rewards come as r_bg: B prompts x G rollouts (any leading shape; the group is the LAST axis).
A group whose rewards have zero spread (all equal, which includes G = 1) carries no learning
signal: every function here returns exact zeros for it and never NaN.
"""

from __future__ import annotations

import jax.numpy as jnp

ADVANTAGE_KINDS = ("grpo", "dr_grpo", "rloo")


def _as_float(x) -> jnp.ndarray:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def zero_spread_mask(r_bg: jnp.ndarray, atol: float = 0.0) -> jnp.ndarray:
    """True for groups whose rewards all agree (max - min <= atol), shape r_bg.shape[:-1].

    DAPO-style dynamic sampling drops these groups and samples more prompts until the batch is
    full (docs/method.md; the RLMR paper, arXiv 2508.18642). A group of size 1 always has zero spread.
    """
    r = _as_float(r_bg)
    return (jnp.max(r, axis=-1) - jnp.min(r, axis=-1)) <= atol


def _centered(r: jnp.ndarray, zero: jnp.ndarray) -> jnp.ndarray:
    c = r - jnp.mean(r, axis=-1, keepdims=True)
    # The float mean of equal values need not equal them exactly; force exact zeros.
    return jnp.where(zero[..., None], 0.0, c)


def standardise_in_group(x_bg: jnp.ndarray, eps: float = 1e-6, ddof: int = 0) -> jnp.ndarray:
    """z = (x - mean_g x) / (std_g x + eps) within each group (last axis); 0 for a constant group.

    Used for the GRPO advantage and to put the RcRL bonuses on the reward's scale before mixing
    (docs/method.md). std is the population std (ddof = 0) unless ddof is given.
    """
    x = _as_float(x_bg)
    g = x.shape[-1]
    zero = zero_spread_mask(x)
    c = _centered(x, zero)
    var = jnp.sum(jnp.square(c), axis=-1, keepdims=True) / max(g - ddof, 1)
    return jnp.where(zero[..., None], 0.0, c / (jnp.sqrt(var) + eps))


def advantages(
    r_bg: jnp.ndarray, kind: str = "grpo", eps: float = 1e-6, ddof: int = 0
) -> jnp.ndarray:
    """Per-rollout advantages from group rewards (docs/method.md).

        grpo:     A_i = (r_i - mean(r)) / (std(r) + eps)      (std: population, ddof = 0)
        dr_grpo:  A_i = r_i - mean(r)                         (RcRL setting, RcRL paper Table 6)
        rloo:     A_i = r_i - mean_{j != i} r_j               (= G / (G - 1) * (r_i - mean(r)))

    r_bg: (..., G). A zero-spread group (including G = 1) gets exactly 0 for every rollout.
    `kind` must be static under jit.
    """
    if kind not in ADVANTAGE_KINDS:
        raise ValueError(f"kind must be one of {ADVANTAGE_KINDS}, got {kind!r}")
    r = _as_float(r_bg)
    g = r.shape[-1]
    zero = zero_spread_mask(r)
    if kind == "grpo":
        return standardise_in_group(r, eps=eps, ddof=ddof)
    if kind == "dr_grpo":
        return _centered(r, zero)
    # rloo
    if g == 1:
        return jnp.zeros_like(r)
    loo_mean = (jnp.sum(r, axis=-1, keepdims=True) - r) / (g - 1)
    return jnp.where(zero[..., None], 0.0, r - loo_mean)
