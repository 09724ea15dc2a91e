"""Weighting ablation (Table 3): the curriculum with equal weights over active criteria instead of
emphasis on the newest.

  python -m rubric_jax.main --config=configs/weighting.py --workdir=/tmp/weighting --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/weighting.py:tiny --workdir=/tmp/weighting_tiny     # CPU smoke run

Expect the newest criterion's weight to be 1/K rather than alpha (weight/* metrics).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.weighting = "equal"
    return finalize(c, arg)
