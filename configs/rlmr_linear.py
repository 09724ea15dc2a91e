"""RLMR's fixed linear weighting baseline: reward = a * writing score + b * (passes every constraint), with
a = b = 1 (the writing score lives in [0, 1], so a violation costs as much as the whole writing range)
("RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing", arXiv 2508.18642; docs/method.md §4).

  python -m rubric_jax.main --config=configs/rlmr_linear.py --workdir=/tmp/rlmr_linear --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rlmr_linear.py:tiny --workdir=/tmp/rlmr_linear_tiny
  --config.rlmr.linear_a=1.0 --config.rlmr.linear_b=0.5     # other weights

Same data, judge, verifier and dynamic sampling as configs/rlmr.py; only the mix differs. Unlike the group
penalty, nothing guarantees a violator a negative advantage: compare rlmr/violator_adv_max with rlmr's.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rlmr import rlmr_overrides, rlmr_tiny


def get_config(arg=None):
    return finalize(rlmr_overrides(base_config(), mix="linear", a=1.0, b=1.0), arg, tiny=rlmr_tiny)
