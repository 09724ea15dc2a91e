"""RcRL: pairwise self-judging per criterion plus a criteria curriculum (Table 6 settings of
"Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable Domains").

  python -m rubric_jax.main --config=configs/rcrl.py --workdir=/tmp/rcrl --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl.py:tiny --workdir=/tmp/rcrl_tiny     # CPU smoke run

The paper's policy judges itself (its frozen base; the default). A small policy that reads rubrics poorly can be
judged by another frozen model instead, loaded beside it with its own tokenizer (--config.judge.dtype sets its
weights' dtype; docs/method.md, "A judge apart from the policy"), e.g. the smoke run's SmolLM2 judged by Qwen2.5:
  python -m rubric_jax.main --config=configs/rcrl.py:tiny --workdir=/tmp/rcrl_judged \
      --config.judge.model=qwen2.5-coder-1.5b-instruct

One optimizer step sees Table 6's 8 completions: 1 prompt x 8 rollouts, in 4 accumulated micro-batches of 2
(TRL, the paper's trainer, counts its batch sizes in completions), so 1300 steps pass about 6.5 times over the
200 prompts. For 8 prompts x 8 rollouts per step instead add --config.prompts_per_step=8
--config.loss.micro_batch_size=8. Rollouts are sampled at temperature 0.7 with top-p 0.8 and top-k 20, Qwen3's
recommended non-thinking settings (Table 6 gives top-p and top-k; 0.7 is the temperature they come with).

Expect reward/mean near 0.5 throughout (win rates average 1/2 in every group: the signal is the spread,
reward/std), one new criterion every 100 steps (active_criteria), and policy_entropy roughly flat; the
paper reports +577 ELO on Creative Writing Bench v3 (GPT-5.2 judge) after 1300 steps with Qwen3-4B.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    return finalize(c, arg)
