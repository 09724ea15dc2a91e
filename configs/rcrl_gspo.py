"""RcRL with GSPO's sequence-level importance ratio ("Group Sequence Policy Optimization", arXiv 2507.18071).

Everything is configs/rcrl.py's but the loss: one ratio per completion, the geometric mean of its token ratios,
clipped per sequence at GSPO's own narrow range (eps_low 3e-4, eps_high 4e-4: a mean of hundreds of token
ratios moves far less than any one of them), and each completion's term averaged over completions
(seq_mean), as in the paper's objective. With one update per batch (num_iterations=1) the ratio is 1 and the
gradient is the sequence-averaged policy gradient; the clip acts from the second iteration on.

  python -m rubric_jax.main --config=configs/rcrl_gspo.py --workdir=/tmp/rcrl_gspo --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_gspo.py:tiny --workdir=/tmp/rcrl_gspo_tiny     # CPU smoke run

Expect ratio == 1 and clip_frac == 0 at num_iterations=1; with --config.loss.num_iterations=2, clip_frac is the
share of tokens in sequences clipped whole (never part of a sequence).
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.loss.importance = "sequence"
    c.loss.aggregation = "seq_mean"
    c.loss.eps_low, c.loss.eps_high = 3e-4, 4e-4
    return finalize(c, arg)
