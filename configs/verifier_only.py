"""RLMR's verifier-only baseline: reward 1 when a rollout keeps every constraint, 0 otherwise (no writing
reward; a group whose rollouts all agree has zero spread and is dropped by dynamic sampling)
("RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing", arXiv 2508.18642; docs/method.md §4).

  python -m rubric_jax.main --config=configs/verifier_only.py --workdir=/tmp/verifier_only --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/verifier_only.py:tiny --workdir=/tmp/verifier_only_tiny

The judge still scores writing (rlmr/writing_mean is logged) so the baseline's cost to quality can be read
off; expect dynamic/kept_frac well below 1, since many groups all pass or all fail.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rlmr import rlmr_overrides, rlmr_tiny


def get_config(arg=None):
    return finalize(rlmr_overrides(base_config(), mix="linear", a=0.0, b=1.0), arg, tiny=rlmr_tiny)
