"""Sample-Static (RARE paper's baseline): each query keeps its own initial rubric for the whole run; integer
scores and the normalised-sum reward as in configs/rare.py, but nothing is ever replaced.

  python -m rubric_jax.main --config=configs/sample_static.py --workdir=/tmp/sample_static --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/sample_static.py:tiny --workdir=/tmp/sample_static_tiny

Expect reward/mean to climb towards 1 and more and more groups with zero spread (reward/zero_spread_groups)
as the policy satisfies its queries' criteria: the saturation RARE's replacements are meant to undo.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rare import rare_overrides, rare_tiny


def get_config(arg=None):
    c = rare_overrides(base_config(), level="static", source="record")
    return finalize(c, arg, tiny=rare_tiny)
