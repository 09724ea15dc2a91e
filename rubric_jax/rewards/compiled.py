"""The reward math of a training step as compiled programs: the same pure functions, jitted.

Called op by op, every small jnp operation in these functions is an XLA program of its own: about fifteen for
one call of `curriculum_weights`, compiled again in every process and for every new criterion count or group
shape. A tiny run spent more time compiling them than judging. Jitted, each function is one program per
input shape (and per static setting), found in jax's in-process cache on the next step.

The arguments named in each `static_argnames` are settings (counts, modes, coefficients): pass them as Python
values. Everything else may be numpy or jax arrays; results are jax arrays, as from the pure functions.
"""

from __future__ import annotations

import jax

from rubric_jax.rewards import curriculum, group, pairwise, pointwise, rlmr

advantages = jax.jit(group.advantages, static_argnames=("kind", "eps", "ddof"))
zero_spread_mask = jax.jit(group.zero_spread_mask, static_argnames=("atol",))
standardise_in_group = jax.jit(group.standardise_in_group, static_argnames=("eps", "ddof"))

curriculum_weights = jax.jit(curriculum.curriculum_weights,
                             static_argnames=("num_criteria", "interval", "alpha", "mode"))
dropout_weights = jax.jit(curriculum.dropout_weights, static_argnames=("num_criteria", "q"))
all_active_weights = jax.jit(curriculum.all_active_weights, static_argnames=("num_criteria",))

pairwise_reward = jax.jit(pairwise.pairwise_reward)
absolute_reward = jax.jit(pointwise.absolute_reward)
normalised_scores = jax.jit(pointwise.normalised_scores)

rlmr_penalty = jax.jit(rlmr.rlmr_penalty, static_argnames=("gamma",))
rlmr_delta = jax.jit(rlmr.rlmr_delta, static_argnames=("gamma",))
linear_mix = jax.jit(rlmr.linear_mix, static_argnames=("a", "b"))
flip_labels = jax.jit(rlmr.flip_labels, static_argnames=("flip_prob",))

__all__ = ["advantages", "zero_spread_mask", "standardise_in_group", "curriculum_weights", "dropout_weights",
           "all_active_weights", "pairwise_reward", "absolute_reward", "normalised_scores", "rlmr_penalty",
           "rlmr_delta", "linear_mix", "flip_labels"]
