"""RLMR with label noise: every rollout's violation flag is flipped with probability 0.1 before the group
penalty, the falsifier a review of "RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing"
(arXiv 2508.18642) proposes: does the penalty still beat linear weighting when its verifier errs?
(docs/method.md §4).

  python -m rubric_jax.main --config=configs/rlmr_noisy.py --workdir=/tmp/rlmr_noisy --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rlmr_noisy.py:tiny --workdir=/tmp/rlmr_noisy_tiny
  --config.reward.verifier_flip=0.2     # more noise; the same flag on rlmr_linear.py gives the noisy baseline

rlmr/flipped_frac reports the share of flags flipped (about 0.1); rlmr/violate_frac is measured on the flipped
flags the update saw, and verifier_pass/<type> on the verifier's own verdicts.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rlmr import rlmr_overrides, rlmr_tiny


def get_config(arg=None):
    c = rlmr_overrides(base_config())
    c.reward.verifier_flip = 0.1
    return finalize(c, arg, tiny=rlmr_tiny)
