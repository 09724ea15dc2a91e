"""RcRL on health advice (RcRL paper section 5.4, Table 8): the 13 health criteria, one added every 50 steps,
650 steps, trained on the bundled consumer health questions.

  python -m rubric_jax.main --config=configs/health_rcrl.py --workdir=/tmp/health --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/health_rcrl.py:tiny --workdir=/tmp/health_tiny   # CPU smoke run

Expect the same shape as rcrl.py at twice the curriculum pace; the paper reports +14.6% HealthBench score
over Qwen3-4B (+25.4% on the consensus subset).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.rubric = "health"
    c.data.path = "health"
    c.reward.interval = 50
    c.steps = 650
    return finalize(c, arg)
