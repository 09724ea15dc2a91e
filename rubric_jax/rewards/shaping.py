"""Reward shaping and the judge-bias audit: pure functions over per-rollout arrays (docs/method.md, section
"Shaping and audit"). Shape letters: B groups, G rollouts of a group, C criteria.

  per_criterion_reward   GDPO-style: each criterion standardised within the group before the weighted sum
  criterion_shares       how much of a group's advantage each criterion moves
  overlong_penalty       DAPO's soft penalty over the last `buffer` tokens before the length cap
  rank_corr              within-group Spearman correlation (judge/length_corr)
"""

from __future__ import annotations

import jax.numpy as jnp

from rubric_jax.rewards.group import standardise_in_group

__all__ = ["NORMALISE", "per_criterion_reward", "criterion_shares", "overlong_penalty", "ranks",
           "rank_corr"]

NORMALISE = ("sum", "per_criterion")


def per_criterion_reward(x_gc: jnp.ndarray, lam_c: jnp.ndarray) -> jnp.ndarray:
    """r_i = sum_c lambda_c z_ic,  z_ic = (x_ic - mean_g x_c) / (std_g x_c + eps)   (0 for a criterion flat in the
    group; eps = 1e-6 and the population std, as the GRPO advantage: `rewards.group.standardise_in_group`).

    Summing raw criterion rewards and standardising once lets the criterion with the widest spread in a group
    set the advantage's sign: a criterion whose rewards vary 100 times less barely moves it. Standardising each
    criterion first gives every criterion a unit spread, weighted by lambda; the GRPO advantage then
    standardises the sum once more. This is NeMo RL's GDPO ("group reward-decoupled normalisation") applied to
    rubric criteria. x_gc: (G, C) one group's per-criterion rewards (win rates or normalised scores)."""
    z = standardise_in_group(jnp.swapaxes(jnp.asarray(x_gc, jnp.float32), -1, -2))  # (C, G)
    return jnp.einsum("...cg,...c->...g", z, jnp.asarray(lam_c, jnp.float32))


def criterion_shares(x_gc: jnp.ndarray, lam_c: jnp.ndarray, normalise: str = "sum") -> jnp.ndarray:
    """(C,) each criterion's share of the advantage's movement within one group:

        u_ic = lambda_c (y_ic - mean_g y_c),    share_c = sum_i |u_ic| / sum_{c', i} |u_ic'|

    with y = x (normalise "sum") or y = z, x standardised per criterion ("per_criterion"). Every group
    advantage here (grpo, dr_grpo, rloo) is a positive multiple of the centred reward, sum_c u_ic, so u_ic is
    criterion c's part of rollout i's advantage. All zeros when nothing moves."""
    x = jnp.asarray(x_gc, jnp.float32)
    if normalise == "per_criterion":
        y = jnp.swapaxes(standardise_in_group(jnp.swapaxes(x, -1, -2)), -1, -2)
    else:
        y = x - jnp.mean(x, axis=-2, keepdims=True)
    u = jnp.abs(y * jnp.asarray(lam_c, jnp.float32)).sum(axis=-2)
    total = u.sum(axis=-1, keepdims=True)
    return jnp.where(total > 0, u / jnp.where(total > 0, total, 1.0), 0.0)


def overlong_penalty(lengths: jnp.ndarray, truncated: jnp.ndarray, cap: int, buffer: int) -> jnp.ndarray:
    """DAPO's soft overlong punishment ("DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
    arXiv 2503.14476, eq. 13), in [-1, 0]:

        R(L) = 0                               L <= cap - buffer
               ((cap - buffer) - L) / buffer    cap - buffer < L <= cap
               -1                               cut at the cap (the answer would have run past it)

    lengths: completion tokens (the end token included); truncated: the completion was cut at the cap."""
    if not 0 < buffer <= cap:
        raise ValueError(f"the overlong buffer must be in [1, cap = {cap}] tokens, got {buffer}")
    n = jnp.asarray(lengths, jnp.float32)
    ramp = jnp.minimum((cap - buffer - n) / buffer, 0.0)
    return jnp.where(jnp.asarray(truncated, bool), -1.0, jnp.maximum(ramp, -1.0))


def ranks(x_g: jnp.ndarray) -> jnp.ndarray:
    """1-based ranks along the last axis, ties given their average rank (Spearman's convention)."""
    x = jnp.asarray(x_g, jnp.float32)
    less = (x[..., None, :] < x[..., :, None]).sum(-1)
    equal = (x[..., None, :] == x[..., :, None]).sum(-1)
    return less + (equal + 1) / 2.0


def rank_corr(a_bg: jnp.ndarray, b_bg: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Spearman's rank correlation of a and b within each group: (corr (B,), defined (B,)). A group where a or b
    is constant has no correlation (defined False, corr 0); average the defined ones."""
    ra, rb = ranks(a_bg), ranks(b_bg)
    ca = ra - ra.mean(-1, keepdims=True)
    cb = rb - rb.mean(-1, keepdims=True)
    den = jnp.sqrt((ca ** 2).sum(-1) * (cb ** 2).sum(-1))
    ok = den > 0
    return jnp.where(ok, (ca * cb).sum(-1) / jnp.where(ok, den, 1.0), 0.0), ok
