"""Reward methods: one module each, registered by name (rubric_jax.methods.base has the protocol).

  rubric       RcRL and its Table 3 baselines: the config's rubric, pairwise or absolute, curriculum, dropout,
               held-out pacing (the rcrl package)
  per_prompt   each prompt's own rubric (config.rubric_source = record | task) (per_prompt.py)
  rare         RARE at sample and task level, MPO, RLER and their static baselines (rare.py)
  rlmr         RLMR: writing reward, constraint verifier, group penalty or linear mix (rlmr.py)

`method_name(config)` says which one a config runs; `make(config, reward_cfg, criteria, default_rubric)` makes
it. The reward terms added on top of any method's reward (the bonuses) are in rubric_jax.methods.terms.
"""

from rubric_jax.methods.base import (METHODS, BuildContext, Method, RewardBatch, RewardOut, get,  # noqa: F401
                                     method_choices, method_name, register)
from rubric_jax.methods import per_prompt, rare, rcrl, rlmr  # noqa: F401,E402 (each registers itself)


def make(config, reward_cfg, criteria, default_rubric) -> Method:
    """The config's method, before anything loads (`prepare` and `build` come next: rubric_jax.rl.setup)."""
    return get(method_name(config))(config, reward_cfg, criteria, default_rubric)
