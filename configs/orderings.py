"""Orderings ablation (Table 3, Ordering 1-3; appendix C.3): the curriculum over a seeded random
permutation of the criteria. Pick the permutation with --config.reward.order_seed=1|2|3.

  python -m rubric_jax.main --config=configs/orderings.py --workdir=/tmp/orderings --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/orderings.py:tiny --workdir=/tmp/orderings_tiny     # CPU smoke run

Expect the same dynamics as rcrl.py with criteria entering in a different order (weight/* names).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.order = "random"
    c.reward.order_seed = 1
    return finalize(c, arg)
