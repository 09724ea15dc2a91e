"""Absolute RaR (RcRL paper Table 3, no curriculum): pointwise 0-4 scores on every criterion from step 0,
equal weights, normalised to [0, 1].

  python -m rubric_jax.main --config=configs/absolute_rar.py --workdir=/tmp/absolute_rar --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/absolute_rar.py:tiny --workdir=/tmp/absolute_rar_tiny     # CPU smoke run

Expect reward/mean to climb and saturate and policy_entropy to fall (the paper reports entropy collapse
within ~300 steps without a curriculum).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.method = "absolute"
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    return finalize(c, arg)
