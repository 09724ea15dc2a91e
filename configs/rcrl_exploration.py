"""RcRL + Exploration Bonus (Table 3; appendix B.1): a leverage-score novelty bonus on mean-pooled final
hidden states, standardised within the group.

  python -m rubric_jax.main --config=configs/rcrl_exploration.py --workdir=/tmp/rcrl_exploration --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_exploration.py:tiny --workdir=/tmp/rcrl_exploration_tiny     # CPU smoke run

Expect bonus/exploration near sqrt(d / (G + lambda)) and slightly higher policy_entropy than rcrl.py.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.exploration_coef = 0.1
    return finalize(c, arg)
