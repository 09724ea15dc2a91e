"""RLER baseline as the RARE paper adapts it ("Reinforcement Learning with Evolving Rubrics", compared in
"RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation"): on every visit to a
query the writer proposes 1-5 new criteria (rare.rler_new, scored 0..rare.rler_max_points) from the query, the
current rollouts and the query's active pool; the judge scores the query's initial rubric, the pool and the
new criteria together on the same rollouts (new criteria count at once); then written criteria whose scores
do not vary across the group are dropped and at most five with the largest score std stay for the next visit.
The initial criteria are always scored and never dropped.

  python -m rubric_jax.main --config=configs/rler.py --workdir=/tmp/rler --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rler.py:tiny --workdir=/tmp/rler_tiny

Expect active_criteria to grow by rler_new on a query's first visit and the pool to settle at or below five
(rler/pool_size), rler/dropped > 0 as written criteria saturate, and reward/before_replacement (the initial
criteria alone) to rise. texts.jsonl lists, per group and step, the criteria written, dropped (with their
std and why) and kept.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rare import rare_overrides, rare_tiny


def get_config(arg=None):
    c = rare_overrides(base_config(), level="rler", source="record")
    return finalize(c, arg, tiny=rler_tiny)


def rler_tiny(c):
    rare_tiny(c)
    c.rare.rler_new = 1
    c.rare.rler_max_points = 2
    return c
