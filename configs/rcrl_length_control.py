"""RcRL with a length-controlled reward: the reward minus 0.5 times each completion's standardised log length
within its group, for runs whose judge-bias audit shows the judge paying for length.

Every run logs judge/length_corr, the within-group rank correlation of the judge's reward with completion length
(evals.curves plots it in the "judge audit" panel). A steady positive value is a verbosity bias; this term takes
out the reward's length trend at rate reward.length_control (the reward term `length_control`, rubric_jax.methods.terms).
Everything else is configs/rcrl.py's.

  python -m rubric_jax.main --config=configs/rcrl_length_control.py --workdir=/tmp/rcrl_lc --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_length_control.py:tiny --workdir=/tmp/rcrl_lc_tiny  # CPU smoke run

Expect bonus/length_control (minus the mean log length) to be logged, and completion_len/mean to grow more slowly
than under configs/rcrl.py when judge/length_corr is positive.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.reward.length_control = 0.5
    return finalize(c, arg)
