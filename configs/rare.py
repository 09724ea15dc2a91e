"""RARE, sample-level: per-query rubrics scored with integer levels; criteria that every rollout of a group
satisfies in full are replaced by new ones a writer (the frozen base, decoding constrained to the criterion
JSON schema) derives from the group's responses, rescored on the same responses before the update
("RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", section 3).

  python -m rubric_jax.main --config=configs/rare.py --workdir=/tmp/rare --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rare.py:tiny --workdir=/tmp/rare_tiny            # CPU smoke run
  --config.rare.direction=positive | mixed             # the paper's other two replacement directions
  --config.rare.writer=openai:MODEL@BASE_URL           # a stronger writer, as the paper does (OPENAI_API_KEY)

Expect rare/trigger_rate to rise as the policy satisfies more initial criteria, rare/event_rate close to it
when the writer's criteria validate, rare/replacement_headroom > 0 and rare/replacement_restores_variance
near 1 (replacements reopen differences), and rubrics.jsonl / texts.jsonl in the workdir listing every
replacement with the scores before and after.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rare import rare_overrides, rare_tiny


def get_config(arg=None):
    c = rare_overrides(base_config(), level="sample", source="record")
    return finalize(c, arg, tiny=rare_tiny)
