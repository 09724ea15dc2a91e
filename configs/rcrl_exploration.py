"""RcRL + Exploration Bonus (Table 3; appendix B.1): a leverage-score novelty bonus on mean-pooled final
hidden states, standardised within the group.

  python -m rubric_jax.main --config=configs/rcrl_exploration.py --workdir=/tmp/rcrl_exploration --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_exploration.py:tiny --workdir=/tmp/rcrl_exploration_tiny     # CPU smoke run

The projection to d = 64 dimensions is drawn once per run from config.seed and kept in the checkpoint, so
bonuses of different steps live in one space. Expect bonus/exploration just under 1: with d > G the G
projected states are linearly independent, each rollout's leverage is close to 1 (the lambda = 1 ridge only
shaves it), so the raw bonus differs little between rollouts and what reaches the reward is its in-group
standardisation (times 0.1). policy_entropy should run slightly higher than rcrl.py's.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.exploration_coef = 0.1
    return finalize(c, arg)
