"""Task-Static (RARE paper's baseline): every query of a video type is scored against that type's shared
six-criterion rubric (script_2d_animation, script_3d_stop_motion, script_live_action, named by each
record's task), fixed for the whole run.

  python -m rubric_jax.main --config=configs/task_static.py --workdir=/tmp/task_static --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/task_static.py:tiny --workdir=/tmp/task_static_tiny

Expect reward/mean to climb; the shared rubric is coarser than per-query ones, so groups saturate sooner.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rare import rare_overrides, rare_tiny


def get_config(arg=None):
    c = rare_overrides(base_config(), level="static", source="task")
    return finalize(c, arg, tiny=rare_tiny)
