"""RcRL + Exploration & Usefulness (Table 3; appendix B): the exploration bonus plus an in-context
usefulness bonus (how much showing a rollout as an example lowers the NLL of its siblings).

  python -m rubric_jax.main --config=configs/rcrl_usefulness.py --workdir=/tmp/rcrl_usefulness --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_usefulness.py:tiny --workdir=/tmp/rcrl_usefulness_tiny     # CPU smoke run

Usefulness costs G * (G - 1) extra scoring passes per prompt; expect time/reward to grow accordingly.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.exploration_coef = 0.1
    c.reward.usefulness_coef = 0.1
    return finalize(c, arg)
