"""Absolute RcRL (Table 3, no pairwise rewards): the curriculum with pointwise scores instead of win rates.

  python -m rubric_jax.main --config=configs/absolute_rcrl.py --workdir=/tmp/absolute_rcrl --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/absolute_rcrl.py:tiny --workdir=/tmp/absolute_rcrl_tiny     # CPU smoke run

Expect reward/mean to rise within each curriculum phase and dip when a new criterion enters.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.method = "absolute"
    return finalize(c, arg)
