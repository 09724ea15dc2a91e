"""Dropout Absolute RaR (Table 3): absolute scores, no curriculum, and each step every criterion is
dropped with probability q (at least one kept) to make the objective non-stationary.

  python -m rubric_jax.main --config=configs/dropout_rar.py --workdir=/tmp/dropout_rar --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/dropout_rar.py:tiny --workdir=/tmp/dropout_rar_tiny     # CPU smoke run

Expect active_criteria to fluctuate around 13 * (1 - q) from step to step.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.method = "absolute"
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    c.reward.dropout_q = 0.5
    return finalize(c, arg)
