"""RARE, task-level: each video type's shared six-criterion rubric is rewritten at five evenly spaced points
of the run from representative rollouts of 12-16 queries of the last three steps; the judge rescores those
representatives and a rewrite is kept only if it separates them (>= 2 distinct rewards) without moving their
mean reward by more than 0.35; a kept rubric scores from the next step on ("RARE: Reinforcement Learning with
Adaptive Rubric Evolution for Open-Ended Generation", section 3 and the appendix on task-level updates).

  python -m rubric_jax.main --config=configs/rare_task.py --workdir=/tmp/rare_task --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rare_task.py:tiny --workdir=/tmp/rare_task_tiny     # CPU smoke run
  --config.data.task=script_live_action    # one video type per run, as the paper trains
  --config.rare.writer=openai:MODEL@BASE_URL --config.rare.judge=openai:MODEL@BASE_URL  # strong models

With the 96 bundled requests at 32 per step (six steps, two epochs) the revisions fall after steps 2, 3 and 4
(the five points merge in so short a run). Expect rare/revision_attempts at those steps, texts.jsonl holding
every revision record (old and new criteria, the representatives' rewards before and after, the decision and
its reason) and rubrics.jsonl the accepted versions. :tiny trains one video type, 4 requests x 4 rollouts for
4 steps: 12 distinct queries by step 2, so one revision is attempted there and applies at step 3.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rare import rare_overrides, rare_tiny, task_level_tiny


def get_config(arg=None):
    c = rare_overrides(base_config(), level="task", source="task")
    return finalize(c, arg, tiny=lambda c: task_level_tiny(rare_tiny(c)))
