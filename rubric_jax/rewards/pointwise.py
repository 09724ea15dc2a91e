"""Pointwise (absolute) rubric rewards: RaR / Absolute RcRL and the RARE normalised sum.

Math: docs/method.md (RcRL, RARE). Sources: Table 3 of "Rubric Curriculum RL: Exploiting the
Generation-Verification Gap in Non-Verifiable Domains" ("Absolute RaR", "Dropout Absolute RaR",
"Absolute RcRL"); "RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended
Generation", section 3 (reward r_i and the eligible set S) and the appendix on the switch budget B = 3.

Conventions (G rollouts of one prompt, C criteria):
  s_gc      judge score of rollout g on criterion c, an integer level in {0..m_c} (float array;
            the expectation readout may give fractional values).
  max_c     m_c, top of each criterion's scale (`Rubric.max_points`).
  valid_gc  True where the judge produced a usable score. A score outside [0, m_c] is treated as
            invalid as well, whatever valid_gc says.
All functions are pure jnp, jit-able, and vmap over a leading prompt axis B.
"""

from __future__ import annotations

import jax.numpy as jnp


def _effective_valid(s_gc: jnp.ndarray, max_c: jnp.ndarray, valid_gc) -> jnp.ndarray:
    in_range = (s_gc >= 0) & (s_gc <= max_c)
    if valid_gc is None:
        return in_range
    return jnp.asarray(valid_gc, dtype=bool) & in_range


def _as_float(x) -> jnp.ndarray:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def normalised_scores(s_gc: jnp.ndarray, max_c: jnp.ndarray) -> jnp.ndarray:
    """x_gc = s_gc / m_c, clipped to [0, 1] (RARE paper appendix, rubric analysis)."""
    s = _as_float(s_gc)
    m = jnp.asarray(max_c, dtype=s.dtype)
    return jnp.clip(s / m, 0.0, 1.0)


def absolute_reward(
    s_gc: jnp.ndarray,
    max_c: jnp.ndarray,
    lambda_c: jnp.ndarray,
    valid_gc: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Weighted pointwise reward in [0, 1] (Absolute RaR / Absolute RcRL, docs/method.md).

        r_g = sum_c lambda_c v_gc (s_gc / m_c) / sum_c lambda_c v_gc

    Each criterion is first normalised to [0, 1] so criteria with different scales weigh only
    by lambda_c. Invalid scores (v_gc = 0) are dropped and the weights are renormalised over the
    rollout's remaining valid criteria, so a judge failure neither rewards nor punishes. A rollout
    with no valid criterion that carries weight gets the mean reward of the rollouts of its
    group that do have one (zero advantage contribution in expectation); if no rollout in the
    group has one, every reward is 0. Use `health.invalid_fraction` to monitor how often this
    happens.

    s_gc (G, C); max_c (C,); lambda_c (C,) from `curriculum_weights`, `all_active_weights` or
    `dropout_weights`; valid_gc (G, C) bool or None. Returns (G,).
    """
    s = _as_float(s_gc)
    m = jnp.asarray(max_c, dtype=s.dtype)
    lam = jnp.asarray(lambda_c, dtype=s.dtype)
    v = _effective_valid(s, m, valid_gc)
    x = normalised_scores(s, m)
    w = jnp.where(v, lam, 0.0)
    den = jnp.sum(w, axis=-1)
    ok = den > 0
    r = jnp.sum(w * x, axis=-1) / jnp.where(ok, den, 1.0)
    n_ok = jnp.sum(ok, axis=-1, keepdims=True)
    fill = jnp.sum(jnp.where(ok, r, 0.0), axis=-1, keepdims=True) / jnp.maximum(n_ok, 1)
    return jnp.where(ok, r, jnp.where(n_ok > 0, fill, 0.0))


def rare_reward(
    s_gc: jnp.ndarray, max_c: jnp.ndarray, valid_gc: jnp.ndarray | None = None
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """RARE reward, the normalised sum r_g = sum_j s_gj / sum_j m_j (docs/method.md).

    RARE paper, section 3: a revision never changes how many criteria there are, their ids or their
    m_j, hence sum_j m_j and the [0, 1] range stay fixed for the whole run. An invalid score counts as 0 in the numerator (the denominator
    is unchanged) and the rollout is flagged.

    Returns (r_g (G,), flagged_g (G,) bool: rollout has at least one invalid score).
    """
    s = _as_float(s_gc)
    m = jnp.asarray(max_c, dtype=s.dtype)
    v = _effective_valid(s, m, valid_gc)
    num = jnp.sum(jnp.where(v, s, 0.0), axis=-1)
    den = jnp.sum(jnp.broadcast_to(m, s.shape), axis=-1)
    return num / den, ~jnp.all(v, axis=-1)


def saturated_criteria(
    s_gc: jnp.ndarray, valid_gc: jnp.ndarray | None, max_c: jnp.ndarray
) -> jnp.ndarray:
    """Eligible set S of RARE: criteria on which EVERY rollout has a valid score equal to m_c.

    docs/method.md; RARE paper, section 3 (eligibility) and the task-prompt appendix (every
    judgment valid and at the maximum). Such a criterion adds the same constant to every
    reward, which cancels in group centering. Uniformly low criteria (every rollout at 0, say) are
    NOT eligible: they may point at a requirement still unmet. One invalid score anywhere in the
    column makes the criterion ineligible. The same test on a later visit detects resaturation.

    s_gc (G, C); valid_gc (G, C) or None (all valid); max_c (C,). Returns bool (C,)
    (reduction over the second-to-last axis, so (B, G, C) -> (B, C) as well).
    """
    s = _as_float(s_gc)
    m = jnp.asarray(max_c, dtype=s.dtype)
    v = _effective_valid(s, m, valid_gc)
    return jnp.all(v & (s == m), axis=-2)


def replacement_budget(saturated_c: jnp.ndarray, budget: int = 3) -> jnp.ndarray:
    """Number of criteria to replace, b = min(B, |S|) with B = 3 by default (RARE paper, section 3).

    Replacing b criteria moves any single reward by at most sum_{j in U} m_j / sum_j m_j
    (RARE paper appendix, switch budget). Returns int32 (scalar, or (B,) for (B, C) input).
    """
    n = jnp.sum(jnp.asarray(saturated_c, dtype=bool), axis=-1)
    return jnp.minimum(n, budget).astype(jnp.int32)


def switch_bound(max_c: jnp.ndarray, replaced_c: jnp.ndarray) -> jnp.ndarray:
    """Largest possible change of one rollout's RARE reward when the `replaced_c` criteria change:
    sum_{j replaced} m_j / sum_j m_j (RARE paper appendix, switch budget)."""
    m = _as_float(max_c)
    sel = jnp.asarray(replaced_c, dtype=bool)
    return jnp.sum(jnp.where(sel, m, 0.0), axis=-1) / jnp.sum(m, axis=-1)
