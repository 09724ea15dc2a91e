"""RLMR: the self-judge's writing score mixed with a constraint verifier through the group penalty
("RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing", arXiv 2508.18642; docs/method.md §4).

  python -m rubric_jax.main --config=configs/rlmr.py --workdir=/tmp/rlmr --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rlmr.py:tiny --workdir=/tmp/rlmr_tiny     # CPU smoke run
  --config.rlmr.writing=pairwise | reward_model --config.rlmr.reward_model=/ckpt/rm   # other writing rewards
  --config.rlmr.verifier=llm          # every constraint to the LLM verifier (default auto: programs first)

Trains on the bundled creative-writing prompts that carry constraints (word counts, banned or required
words, tense, point of view, openings and endings...). Each rollout's writing reward is the frozen base's
pointwise score on the creative_writing rubric; every rollout that breaks a constraint loses delta, chosen per
group so that it ends at least gamma = 0.1 below the group mean (negative advantage under GRPO). Groups where
every rollout breaks a constraint, and groups without reward spread, are dropped and refilled by dynamic
sampling (up to 2 extra batches). Expect rlmr/violate_frac to fall, rlmr/violator_adv_max < 0 at every step
that has violators, verifier_pass/<type> per constraint type, and dynamic/kept_frac near 1 once the policy
keeps most constraints.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rlmr import rlmr_overrides, rlmr_tiny


def get_config(arg=None):
    return finalize(rlmr_overrides(base_config()), arg, tiny=rlmr_tiny)
