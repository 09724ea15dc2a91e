"""The reward math of a training step as compiled programs: the same pure functions, jitted.

Called op by op, every small jnp operation in these functions is an XLA program of its own: about fifteen for
one call of `curriculum_weights`, compiled again in every process and for every new criterion count or group
shape. A tiny run spent more time compiling them than judging. Jitted, each function is one program per
input shape (and per static setting), found in jax's in-process cache on the next step.

The arguments named in each `static_argnames` are settings (counts, modes, coefficients): pass them as Python
values. Everything else may be numpy or jax arrays; results are jax arrays, as from the pure functions.
Functions with a criterion axis see it padded to `criteria_width` (see there).
"""

from __future__ import annotations

import jax
import numpy as np

from rubric_jax.rewards import curriculum, group, pairwise, pointwise, rlmr

CRITERIA_BUCKET = 8


def criteria_width(c: int) -> int:
    """The criterion axis a compiled program sees: c rounded up to a multiple of 8. A curriculum adds one
    criterion a step and RARE's rubrics differ in length from prompt to prompt; padded, rubrics of up to 8
    criteria share one program and those of 9 to 16 a second, instead of one program per count."""
    return max(1, -(-int(c) // CRITERIA_BUCKET)) * CRITERIA_BUCKET


def pad_criteria(x, width: int, value) -> np.ndarray:
    """x with its last (criterion) axis padded to `width` with `value`."""
    x = np.asarray(x)
    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])], constant_values=value)


advantages = jax.jit(group.advantages, static_argnames=("kind", "eps", "ddof"))
zero_spread_mask = jax.jit(group.zero_spread_mask, static_argnames=("atol",))
standardise_in_group = jax.jit(group.standardise_in_group, static_argnames=("eps", "ddof"))

curriculum_weights = jax.jit(curriculum.curriculum_weights,
                             static_argnames=("num_criteria", "interval", "alpha", "mode"))
dropout_weights = jax.jit(curriculum.dropout_weights, static_argnames=("num_criteria", "q"))
all_active_weights = jax.jit(curriculum.all_active_weights, static_argnames=("num_criteria",))

rlmr_penalty = jax.jit(rlmr.rlmr_penalty, static_argnames=("gamma",))
rlmr_delta = jax.jit(rlmr.rlmr_delta, static_argnames=("gamma",))
linear_mix = jax.jit(rlmr.linear_mix, static_argnames=("a", "b"))
flip_labels = jax.jit(rlmr.flip_labels, static_argnames=("flip_prob",))

# Criterion-indexed functions take padded inputs; each padded criterion adds an exact zero (a zero weight, a
# zero score over a zero maximum) or is cut from the result.
_pairwise_reward = jax.jit(pairwise.pairwise_reward)
_absolute_reward = jax.jit(pointwise.absolute_reward)
_normalised_scores = jax.jit(pointwise.normalised_scores)
_rare_reward = jax.jit(pointwise.rare_reward)
_saturated_criteria = jax.jit(pointwise.saturated_criteria)


def pairwise_reward(w_gc, lambda_c):
    """`pairwise.pairwise_reward` (r_i = sum_c lambda_c w_ic); padded criteria have weight 0."""
    width = criteria_width(np.shape(lambda_c)[-1])
    return _pairwise_reward(pad_criteria(w_gc, width, 0.0), pad_criteria(lambda_c, width, 0.0))


def absolute_reward(s_gc, max_c, lambda_c, valid_gc=None):
    """`pointwise.absolute_reward`; padded criteria are invalid and weigh 0."""
    width = criteria_width(np.shape(max_c)[-1])
    valid = np.ones(np.shape(s_gc), bool) if valid_gc is None else valid_gc
    return _absolute_reward(pad_criteria(s_gc, width, 0.0), pad_criteria(max_c, width, 1.0),
                            pad_criteria(lambda_c, width, 0.0), pad_criteria(valid, width, False))


def normalised_scores(s_gc, max_c):
    """`pointwise.normalised_scores` (s / m clipped to [0, 1])."""
    c = np.shape(max_c)[-1]
    width = criteria_width(c)
    return _normalised_scores(pad_criteria(s_gc, width, 0.0), pad_criteria(max_c, width, 1.0))[..., :c]


def rare_reward(s_gc, max_c, valid_gc=None):
    """`pointwise.rare_reward` (sum_j s_j / sum_j m_j, and the flag of a rollout with an invalid score);
    padded criteria score 0 of 0 and are valid."""
    width = criteria_width(np.shape(max_c)[-1])
    valid = np.ones(np.shape(s_gc), bool) if valid_gc is None else valid_gc
    return _rare_reward(pad_criteria(s_gc, width, 0.0), pad_criteria(max_c, width, 0.0),
                        pad_criteria(valid, width, True))


def saturated_criteria(s_gc, valid_gc, max_c):
    """`pointwise.saturated_criteria` (criteria at their maximum with a valid score in every rollout)."""
    c = np.shape(max_c)[-1]
    width = criteria_width(c)
    valid = np.ones(np.shape(s_gc), bool) if valid_gc is None else valid_gc
    return _saturated_criteria(pad_criteria(s_gc, width, 0.0), pad_criteria(valid, width, False),
                               pad_criteria(max_c, width, 1.0))[..., :c]


__all__ = ["CRITERIA_BUCKET", "criteria_width", "pad_criteria", "advantages", "zero_spread_mask",
           "standardise_in_group", "curriculum_weights", "dropout_weights", "all_active_weights",
           "pairwise_reward", "absolute_reward", "normalised_scores", "rare_reward", "saturated_criteria",
           "rlmr_penalty", "rlmr_delta", "linear_mix", "flip_labels"]
