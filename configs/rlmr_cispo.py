"""RLMR trained with CISPO's objective ("MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
Attention", arXiv 2506.13585, section 3.1).

Everything is configs/rlmr.py's but the policy term: each token's importance ratio, clipped to
[1 - eps_low, 1 + eps_high], becomes a weight with no gradient of its own on the token's log-probability, so a
token outside the clip range still learns (scaled by the bound) where PPO's clip would drop it. MiniMax-M1
clips only from above; eps_low = 1.0 here leaves the weight unbounded below (it cannot go under 0), and
eps_high = 0.28 is DAPO's clip-higher bound. The dual clip does not apply.

  python -m rubric_jax.main --config=configs/rlmr_cispo.py --workdir=/tmp/rlmr_cispo --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rlmr_cispo.py:tiny --workdir=/tmp/rlmr_cispo_tiny     # CPU smoke run

Expect RLMR's figures (rlmr/violate_frac, rlmr/violator_adv_max < 0) as in configs/rlmr.py, dual_clip_frac 0,
and clip_frac counting the tokens whose weight sits at the bound (0 at num_iterations=1, where every ratio is 1).
"""

from rubric_jax.config_base import base_config, finalize
from rubric_jax.methods.rlmr import rlmr_overrides, rlmr_tiny


def get_config(arg=None):
    c = rlmr_overrides(base_config())
    c.loss.objective = "cispo"
    c.loss.eps_low, c.loss.eps_high = 1.0, 0.28
    return finalize(c, arg, tiny=rlmr_tiny)
