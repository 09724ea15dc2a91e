"""RcRL + KL term (Table 3): adds a k3 KL penalty to the base model (adapters off; no second copy).
The paper gives no coefficient; 0.04 is the beta that TRL (which the paper trained with) long defaulted to.

  python -m rubric_jax.main --config=configs/rcrl_kl.py --workdir=/tmp/rcrl_kl --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_kl.py:tiny --workdir=/tmp/rcrl_kl_tiny     # CPU smoke run

Expect kl to stay small and positive; one extra reference log-prob pass per step.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.loss.kl_coef = 0.04
    c.loss.kl_kind = "k3"
    return finalize(c, arg)
