"""RLMR's writing-reward-only baseline: the self-judge's pointwise rubric score alone (the verifier still runs,
for the rlmr/violate_frac and verifier_pass/<type> figures, but does not touch the reward)
("RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing", arXiv 2508.18642; docs/method.md §4).

  python -m rubric_jax.main --config=configs/writing_only.py --workdir=/tmp/writing_only --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/writing_only.py:tiny --workdir=/tmp/writing_only_tiny

The paper's finding to look for: with writing reward alone, constraint keeping does not improve (rlmr/violate_frac
stays flat or rises) while the writing score climbs.
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rlmr import rlmr_overrides, rlmr_tiny


def get_config(arg=None):
    return finalize(rlmr_overrides(base_config(), mix="linear", a=1.0, b=0.0), arg, tiny=rlmr_tiny)
