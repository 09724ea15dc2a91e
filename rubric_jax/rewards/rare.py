"""Statistics logged for RARE revision events (docs/method.md).

Source: "RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation" (the
RARE paper): section 5 / Table 3(a) (per event, on the replacement criteria as one block:
post-switch score, opens headroom, restores variance, mean |A_rep|), Table 3(b) and its appendix
definitions (per criterion: headroom, variance, mean |z|, headroom rate, averaged over a set of
criteria such as all Positive or all Negative replacements of one event), Table 6 (headroom flag:
group mean below 1; variance flag: population variance above 0).

Inputs are the rescored matrix s_gc (G rollouts x C criteria) with maxima m_c and a bool[C]
`set_c` selecting the criteria of interest (e.g. the replaced ones). The statistics use the
scores as given: pass only validated score matrices (RARE rejects a rescoring with invalid
entries). Everything is pure jnp, jit-able and vmappable over events.
"""

from __future__ import annotations

import jax.numpy as jnp

from rubric_jax.rewards.group import standardise_in_group
from rubric_jax.rewards.pointwise import normalised_scores

# The RARE paper counts a criterion as having headroom when mu < 1 - 1e-12. In float32 this threshold
# rounds to 1.0, i.e. "mu < 1"; it is kept as written for float64 callers.
HEADROOM_TOL = 1e-12
Z_EPS = 1e-6


def criterion_stats(s_gc: jnp.ndarray, max_c: jnp.ndarray, eps: float = Z_EPS) -> dict:
    """Per-criterion statistics (RARE paper appendix, Table 3(b) definitions).

    With x_gc = s_gc / m_c, mu_c = mean_g x_gc and sigma_c the population std over the G rollouts:
        headroom_c      = 1 - mu_c
        variance_c      = sigma_c^2
        mean_abs_z_c    = (1/G) sum_g |x_gc - mu_c| / (sigma_c + eps)
        has_headroom_c  = mu_c < 1 - 1e-12
        has_variance_c  = sigma_c^2 > 0
    Returns a dict of (C,) arrays (plus "mean").
    """
    x = normalised_scores(s_gc, max_c)
    mu = jnp.mean(x, axis=-2)
    var = jnp.mean(jnp.square(x - mu[..., None, :]), axis=-2)
    sigma = jnp.sqrt(var)
    z = (x - mu[..., None, :]) / (sigma[..., None, :] + eps)
    return {
        "mean": mu,
        "headroom": 1.0 - mu,
        "variance": var,
        "mean_abs_z": jnp.mean(jnp.abs(z), axis=-2),
        "has_headroom": mu < 1.0 - HEADROOM_TOL,
        "has_variance": var > 0,
    }


def set_stats(
    s_gc: jnp.ndarray, max_c: jnp.ndarray, set_c: jnp.ndarray | None = None, eps: float = Z_EPS
) -> dict:
    """Table 3(b) statistics of one event: per-criterion statistics averaged equally over `set_c`.

        headroom = mean_{c in set} (1 - mu_c)        variance   = mean_{c in set} sigma_c^2
        mean_abs_z = mean_{c in set} mean|z_gc|      headroom_rate = fraction of the set with headroom
    plus "num_criteria" = |set|. An empty set gives zeros (check num_criteria before averaging
    events). Returns a dict of scalars.
    """
    st = criterion_stats(s_gc, max_c, eps)
    c = st["mean"].shape[-1]
    sel = jnp.ones((c,), dtype=bool) if set_c is None else jnp.asarray(set_c, dtype=bool)
    n = jnp.sum(sel, axis=-1)
    nf = jnp.maximum(n, 1).astype(st["mean"].dtype)

    def avg(a):
        return jnp.sum(jnp.where(sel, a.astype(nf.dtype), 0.0), axis=-1) / nf

    return {
        "num_criteria": n,
        "headroom": avg(st["headroom"]),
        "variance": avg(st["variance"]),
        "mean_abs_z": avg(st["mean_abs_z"]),
        "headroom_rate": avg(st["has_headroom"]),
    }


def replacement_stats(
    s_gc: jnp.ndarray, max_c: jnp.ndarray, set_c: jnp.ndarray, eps: float = 1e-6
) -> dict:
    """Table 3(a) statistics: the replacement criteria scored as one block.

    Each rollout's block score is y_g = sum_{c in set} s_gc / sum_{c in set} m_c. Then
        score            = mean_g y_g              (post-switch score)
        headroom         = 1 - mean_g y_g
        variance         = population variance of y over the group
        opens_headroom   = mean_g y_g < 1          restores_variance = variance > 0
        mean_abs_adv     = mean_g |A_rep_g| with A_rep = y standardised within the group
                           (`standardise_in_group`: zero for a constant group)
    Before a replacement every y_g is 1 (the replaced criteria were saturated), so headroom and
    variance both start at 0. Returns a dict of scalars.
    """
    s = jnp.asarray(s_gc, dtype=jnp.result_type(s_gc, jnp.float32))
    m = jnp.asarray(max_c, dtype=s.dtype)
    s = jnp.clip(s, 0.0, m)
    sel = jnp.asarray(set_c, dtype=bool)
    den = jnp.sum(jnp.where(sel, m, 0.0), axis=-1, keepdims=True)
    y = jnp.sum(jnp.where(sel, s, 0.0), axis=-1) / jnp.maximum(den, 1e-30)
    mu = jnp.mean(y, axis=-1)
    var = jnp.mean(jnp.square(y - mu[..., None]), axis=-1)
    a = standardise_in_group(y, eps=eps)
    return {
        "score": mu,
        "headroom": 1.0 - mu,
        "variance": var,
        "opens_headroom": mu < 1.0 - HEADROOM_TOL,
        "restores_variance": var > 0,
        "mean_abs_adv": jnp.mean(jnp.abs(a), axis=-1),
    }
