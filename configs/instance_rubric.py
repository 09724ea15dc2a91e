"""Instance-specific rubrics (the RcRL paper's HealthBench baseline, its Table 4 "Instance-specific" row):
every prompt is judged against its own rubric, all criteria active with equal weights from step 0, scored
pointwise (absolute) by the frozen base. RcRL's point is that one fixed rubric with a curriculum competes
with this; run both on the same data to compare.

  python -m rubric_jax.main --config=configs/instance_rubric.py --workdir=/tmp/instance --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/instance_rubric.py:tiny --workdir=/tmp/instance_tiny   # CPU smoke run
  --config.data.path=my_prompts.jsonl      # records with their own "rubric" (e.g. HealthBench's, converted)
  --config.reward.method=pairwise         # win rates per criterion instead of scores

The bundled data are the short-video script requests (each with its own rubric). Expect score/mean to rise
and active_criteria to be the mean rubric size (5-8 here).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.data.path = "scripts"
    c.rubric = ""
    c.rubric_source = "record"
    c.reward.method = "absolute"
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    return finalize(c, arg)
