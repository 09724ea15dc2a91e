"""RLMR: a writing reward combined with a hard-constraint verifier (docs/method.md).

Source: "RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing" (arXiv 2508.18642): the
group penalty delta and its guarantee, DAPO-style filtering of groups without signal, and the fixed
linear-weighting baseline.

One group has n rollouts with writing rewards r_n and verifier outcomes violate_n (True = the
rollout breaks at least one explicit constraint). Everything is pure jnp, jit-able and vmaps over
a leading prompt axis B.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _as_float(x) -> jnp.ndarray:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def rlmr_delta(r_n: jnp.ndarray, violate_n: jnp.ndarray, gamma: float) -> jnp.ndarray:
    """The penalty subtracted from every violator (docs/method.md):

        delta = max(0, (n * r_vio_max + n * gamma - sum_i r_i) / (n - k))   if 0 < k < n
        delta = 0                                                           if k = 0 or k = n

    where k counts the violating rollouts and r_vio_max is the highest reward any of them got. Shape: r_n[:-1].
    """
    r = _as_float(r_n)
    v = jnp.asarray(violate_n, dtype=bool)
    n = r.shape[-1]
    k = jnp.sum(v, axis=-1)
    active = (k > 0) & (k < n)
    r_vio_max = jnp.max(jnp.where(v, r, -jnp.inf), axis=-1)
    r_vio_max = jnp.where(active, r_vio_max, 0.0)  # keep inf out of the unused branch
    total = jnp.sum(r, axis=-1)
    denom = jnp.where(active, n - k, 1).astype(r.dtype)
    delta = jnp.maximum(0.0, (n * r_vio_max + n * gamma - total) / denom)
    return jnp.where(active, delta, 0.0)


def rlmr_penalty(
    r_n: jnp.ndarray, violate_n: jnp.ndarray, gamma: float
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Apply the RLMR group penalty: r'_i = r_i - delta * violate_i (docs/method.md).

    Guarantee (for 0 < k < n): after the penalty every violator is at least gamma below the new
    group mean, r'_vio <= mean(r') - gamma, so with gamma > 0 its advantage is negative under
    grpo, dr_grpo and rloo. Proof sketch: mean(r') = (sum r - k delta) / n, and the condition
    r_vio_max - delta <= mean(r') - gamma rearranges to delta >= (n r_vio_max + n gamma -
    sum r) / (n - k).
    k = 0: rewards unchanged. k = n: rewards unchanged, and the group carries no constraint signal
    (every rollout fails), so the returned flag marks it for filtering.

    Returns (r'_n, all_violate) with all_violate = (k == n), shape r_n.shape[:-1].
    """
    r = _as_float(r_n)
    v = jnp.asarray(violate_n, dtype=bool)
    delta = rlmr_delta(r, v, gamma)
    r_new = r - jnp.where(v, delta[..., None], 0.0)
    return r_new, jnp.all(v, axis=-1)


def linear_mix(r: jnp.ndarray, v: jnp.ndarray, a: float, b: float) -> jnp.ndarray:
    """Fixed linear weighting baseline a * r + b * v (RLMR paper, arXiv 2508.18642; docs/method.md).

    v is the verifier's pass indicator (1 = passes all constraints), e.g. `1 - violate`.
    a = 0, b = 1 is the verifier-only baseline; a = 1, b = 0 the writing-reward-only baseline.
    """
    r = _as_float(r)
    return a * r + b * jnp.asarray(v, dtype=r.dtype)


def flip_labels(key: jax.Array, violate_n: jnp.ndarray, flip_prob: float) -> jnp.ndarray:
    """Flip each verifier label independently with probability flip_prob.

    Simulates an imperfect verifier, to measure how the RLMR penalty degrades when its
    guarantee's premise (a correct verifier) fails (docs/method.md).
    """
    v = jnp.asarray(violate_n, dtype=bool)
    flips = jax.random.bernoulli(key, flip_prob, v.shape)
    return v ^ flips


def verifier_precision_recall(
    pred_violate: jnp.ndarray, true_violate: jnp.ndarray
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Precision and recall of the verifier at detecting violations, against labelled data.

    precision = TP / (TP + FP), recall = TP / (TP + FN), with "violation" as the positive class;
    an empty denominator gives 1.0 (no false alarms / nothing to miss).
    """
    p = jnp.asarray(pred_violate, dtype=bool).reshape(-1)
    t = jnp.asarray(true_violate, dtype=bool).reshape(-1)
    tp = jnp.sum(p & t).astype(jnp.float32)
    fp = jnp.sum(p & ~t).astype(jnp.float32)
    fn = jnp.sum(~p & t).astype(jnp.float32)
    precision = jnp.where(tp + fp > 0, tp / jnp.maximum(tp + fp, 1.0), 1.0)
    recall = jnp.where(tp + fn > 0, tp / jnp.maximum(tp + fn, 1.0), 1.0)
    return precision, recall
