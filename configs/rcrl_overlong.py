"""RcRL with DAPO's two answers to overlong completions ("DAPO: An Open-Source LLM Reinforcement Learning
System at Scale", arXiv 2503.14476, section 3.4).

  reward.overlong_penalty = 1, reward.overlong_buffer = 256   the reward falls linearly by up to 1 over the last
                                                               256 tokens before max_completion_len, and a
                                                               completion cut at the cap loses 1
  loss.mask_truncated = True                                   a completion cut at the cap takes no part in the loss

Either can be used alone (set the other back: --config.reward.overlong_penalty=0 or
--config.loss.mask_truncated=False). Everything else is configs/rcrl.py's.

  python -m rubric_jax.main --config=configs/rcrl_overlong.py --workdir=/tmp/rcrl_overlong --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_overlong.py:tiny --workdir=/tmp/rcrl_overlong_tiny  # CPU smoke run

Expect bonus/overlong (the mean penalty, <= 0) and completion_truncated to fall together, and truncated_masked
(the share of completions left out of the loss) to follow completion_truncated.
"""

from rubric_jax.config_base import base_config, finalize


def tiny(c):
    c.reward.overlong_buffer = 4  # the smoke run's completions are 16 tokens at most


def get_config(arg=None):
    c = base_config()
    c.reward.overlong_penalty = 1.0
    c.reward.overlong_buffer = 256
    c.loss.mask_truncated = True
    return finalize(c, arg, tiny=tiny)
