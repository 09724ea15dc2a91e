"""RcRL with each criterion's win rates standardised within the group before they are summed (GDPO-style
per-criterion normalisation, as in NeMo RL).

With several active criteria, summing the win rates and standardising once lets the criterion whose win rates
spread widest in a group decide the advantages; standardising each criterion first gives each a unit spread,
weighted by the curriculum's lambda, and the GRPO advantage standardises the sum once more
(rubric_jax.rewards.shaping.per_criterion_reward). Everything else is configs/rcrl.py's.

  python -m rubric_jax.main --config=configs/rcrl_per_criterion.py --workdir=/tmp/rcrl_pc --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_per_criterion.py:tiny --workdir=/tmp/rcrl_pc_tiny  # CPU smoke run

Expect adv/criterion_share/<criterion> (logged in every mode) to sit closer to the curriculum's weights than
under configs/rcrl.py, where a high-variance criterion takes more than its weight's share.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.normalise = "per_criterion"
    return finalize(c, arg)
