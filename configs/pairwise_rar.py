"""Pairwise RaR (Table 3, no curriculum): pairwise win rates on every criterion from step 0, equal weights.

  python -m rubric_jax.main --config=configs/pairwise_rar.py --workdir=/tmp/pairwise_rar --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/pairwise_rar.py:tiny --workdir=/tmp/pairwise_rar_tiny     # CPU smoke run

Expect reward/mean fixed at 0.5 (pairwise) with a steady reward/std; all 13 criteria judged every step
(13x the judging cost of RcRL's first phase).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    return finalize(c, arg)
