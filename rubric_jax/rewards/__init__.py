"""Pure reward functions over judge score arrays (math and sources: docs/method.md).

Modules: pairwise (RcRL win rates), curriculum (criterion weights), pacing (when the curriculum adds a
criterion, from held-out win rates), pointwise (absolute and RARE rewards, saturation), rare (RARE event
statistics), rlmr (constraint penalty), group (advantages, zero-spread filter), bonuses (exploration /
usefulness), health (judge health metrics).
"""

from rubric_jax.rewards.group import (
    ADVANTAGE_KINDS,
    advantages,
    standardise_in_group,
    zero_spread_mask,
)
from rubric_jax.rewards.bonuses import (
    add_bonuses,
    exploration_bonus,
    mean_pool,
    random_projection,
    usefulness_bonus,
)
from rubric_jax.rewards.curriculum import (
    CURRICULUM_MODES,
    active_mask,
    all_active_weights,
    curriculum_weights,
    dropout_mask,
    dropout_weights,
    introduction_steps,
    num_active,
    permute_order,
    weights_from_mask,
)
from rubric_jax.rewards.pacing import (
    PACING_MODES,
    PacingConfig,
    PacingState,
    decide,
    plateaued,
    weights_for_active,
    weights_from_state,
)
from rubric_jax.rewards.judge_health import (
    invalid_fraction,
    order_agreement,
    first_position_rate_flat,
    position_bias,
    position_bias_flat,
    saturation,
    verdict_entropy,
)
from rubric_jax.rewards.listwise import listwise_preferences, listwise_scores, listwise_win_rates, presentation_orders
from rubric_jax.rewards.pairwise import (
    all_pairs_mask,
    circular_pairs_mask,
    first_win_probs,
    hard_verdicts,
    sign_verdicts,
    mask_from_pairs,
    pairs_from_mask,
    pairwise_reward,
    symmetrize,
    win_rates,
)
from rubric_jax.rewards.pointwise import (
    absolute_reward,
    normalised_scores,
    rare_reward,
    replacement_budget,
    saturated_criteria,
    switch_bound,
)
from rubric_jax.rewards.rare import criterion_stats, replacement_stats, set_stats
from rubric_jax.rewards.rlmr import (
    flip_labels,
    linear_mix,
    rlmr_delta,
    rlmr_penalty,
    verifier_precision_recall,
)

__all__ = [
    "ADVANTAGE_KINDS",
    "CURRICULUM_MODES",
    "PACING_MODES",
    "PacingConfig",
    "PacingState",
    "absolute_reward",
    "active_mask",
    "add_bonuses",
    "advantages",
    "all_active_weights",
    "all_pairs_mask",
    "circular_pairs_mask",
    "criterion_stats",
    "curriculum_weights",
    "decide",
    "dropout_mask",
    "dropout_weights",
    "exploration_bonus",
    "first_win_probs",
    "flip_labels",
    "hard_verdicts",
    "listwise_preferences",
    "listwise_scores",
    "listwise_win_rates",
    "sign_verdicts",
    "introduction_steps",
    "invalid_fraction",
    "linear_mix",
    "mask_from_pairs",
    "mean_pool",
    "normalised_scores",
    "num_active",
    "order_agreement",
    "pairs_from_mask",
    "pairwise_reward",
    "presentation_orders",
    "permute_order",
    "plateaued",
    "first_position_rate_flat",
    "position_bias",
    "position_bias_flat",
    "saturation",
    "random_projection",
    "rare_reward",
    "replacement_budget",
    "replacement_stats",
    "rlmr_delta",
    "rlmr_penalty",
    "saturated_criteria",
    "set_stats",
    "standardise_in_group",
    "switch_bound",
    "symmetrize",
    "usefulness_bonus",
    "verdict_entropy",
    "verifier_precision_recall",
    "weights_for_active",
    "weights_from_mask",
    "weights_from_state",
    "win_rates",
    "zero_spread_mask",
]
