"""RcRL with automatic curriculum pacing: the next criterion arrives when the newest one stops improving on
held-out prompts, instead of every 100 steps (the RcRL paper leaves pacing by held-out quality as future work;
rubric_jax/rewards/pacing.py gives the rule, docs/method.md the reasoning).

  python -m rubric_jax.main --config=configs/rcrl_auto_pacing.py --workdir=/tmp/rcrl_auto --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_auto_pacing.py:tiny --workdir=/tmp/rcrl_auto_tiny     # CPU smoke run

Every 10 steps the policy answers 16 held-out prompts greedily (they leave the training set) and the frozen judge
compares each answer with the base model's (generated once, kept in the checkpoint) on the newest criterion, in
both orders. A criterion arrives once the best of the last 3 readings beats the best before them by no more than
0.02, never sooner than 50 steps and never later than 200 steps after the previous one.

Expect pacing/heldout_win_rate to start near 0.5 after each arrival and rise while the criterion is learnt;
pacing/active_criteria steps up irregularly (pacing/reason_plateau or reason_max_interval says why), and
time/pacing adds a held-out generation and 32 verdicts per reading to the reading steps.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.pacing = "auto"
    return finalize(c, arg)
