"""MPO baseline as the RARE paper adapts it ("Meta Policy Optimization"; compared in "RARE: Reinforcement
Learning with Adaptive Rubric Evolution for Open-Ended Generation"): at the same five revision points as
task-level RARE, the writer analyses the scored outputs of recent steps and merges refinements into each
video type's shared rubric. Unlike RARE's task level there is no acceptance test: every valid rewrite is kept
(the representatives are still rescored, to log how far the reward moved).

  python -m rubric_jax.main --config=configs/mpo.py --workdir=/tmp/mpo --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/mpo.py:tiny --workdir=/tmp/mpo_tiny

Expect the same revision steps as configs/rare_task.py, rare/revision_accepted equal to the attempts whose
writer succeeded, and a larger |rare/revision_mean_shift| than RARE's (nothing bounds it).
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rare import rare_overrides, rare_tiny, task_level_tiny


def get_config(arg=None):
    c = rare_overrides(base_config(), level="mpo", source="task")
    return finalize(c, arg, tiny=lambda c: task_level_tiny(rare_tiny(c)))
