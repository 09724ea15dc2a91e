"""IFEval-style instruction following learnt from a program's verdicts alone: no judge trains or scores it.

The embedded SmolLM2-135M-Instruct is trained with GRPO + LoRA where the only reward is RLMR's constraint
verifier (docs/method.md §4; `configs/verifier_only.py` has the same reward but still has the judge score the
writing, for the log; here rlmr.writing="none" and the judge never runs): the share of its prompt's
instructions a rollout keeps (rlmr.credit="share"; 1 or 0 on the prompts with one instruction), every verdict
IFEval's own checker (`rubric_jax.verifiers.ifeval`, strict). The prompts are `rubric_jax/data/ifeval_train.jsonl`: 169 prompts made
by `rubric_jax.data.ifeval_train` from 42 task stems and 8 yes/no questions written for it x 24 of IFEval's 25
instruction ids, one instruction on most prompts and two on the rest, disjoint from the 132 prompts that
`python -m evals.ifeval` scores. The result is then measured by a program too:

  python -m rubric_jax.main --config=configs/learn_ifeval.py --workdir=/tmp/learn_ifeval
  python -m evals.ifeval --models=base=smollm2-135m-instruct,trained=/tmp/learn_ifeval --out=/tmp/learn_ifeval_eval
  python -m rubric_jax.main --config=configs/learn_ifeval.py:tiny --workdir=/tmp/learn_ifeval_tiny   # smoke run

The evaluation's `ifeval.md` / `ifeval.json` give both models' strict and loose accuracies, per instruction id,
and the paired bootstrap interval of trained minus base (resampling the same prompts for both).

Sized for a 2-core CPU: the training run and that evaluation together should take under 25 minutes. Measured
on this 2-core machine with nothing else running: 12 steps of 25-27 s (325 s in all; on a slower day the same
steps took 55 s each, 671 s), the evaluation about 6 minutes (132 greedy answers per model at 1.1-2.5 s each).
The choices:

  - 2 prompts x G = 8 rollouts per step, 12 steps. G = 8 because the reward is binary: with a pass rate p a
    group has a learning signal only when it is mixed, 1 - p^8 - (1-p)^8 (0.83 at p = 0.2, 0.57 at p = 0.1),
    where G = 4 leaves 41-66% of groups flat.
  - dynamic sampling with at most one refill (DAPO, as the RLMR configs): a flat group has zero advantage but
    costs as much in the update as a mixed one, and on a CPU the update (~2/3 of a step) costs about twice the
    sampling of a batch, so one more batch of rollouts is the cheaper way to fill the update with signal.
  - completions <= 160 tokens: IFEval answers that keep their instructions are short, and a rollout cut off
    before its end cannot keep an ending, a postscript or a closing quote, so the cap rewards finishing (the
    evaluation allows 256); the longest word count a training prompt asks for is 100 words.
  - temperature 1.0 (top-k 20, top-p 0.8 as the RLMR configs): diverse groups, while the truncation keeps a
    135M model's text from dissolving; the evaluation itself is greedy.
  - LoRA r = 16, alpha = 32, no dropout, lr 2e-4 constant after 2 warmup steps: AdamW moves each adapter
    weight by about lr per step, and 12 steps is all there is; a LoRA rate some ten times a full fine-tune's is
    the usual range. Dropout would make the update's log-probabilities differ from the sampler's for no
    regularisation gain at this length.
  - GRPO advantages (normalised by the group's std), token-mean loss, no KL: the RLMR configs' loss.
  - the reward counts the share of instructions kept, not only a rollout that keeps all of them: on a split of
    the training prompts (`python -m rubric_jax.data.ifeval_train --split_dir=DIR`, 130 to train on, 39 held
    out), the same 12 steps gained +12.8 points instruction-level strict on the held-out 39 [-4.1, +31.2]
    with the share against +0.0 [-13.7, +12.8] with the all-or-nothing pass. A prompt with two instructions
    then tells a rollout that keeps one from one that keeps none.
  - float32 weights: bfloat16 is no faster on this CPU (a matmul of the model's shapes: 12 ms against 10), and
    the evaluation loads the base in float32, so base and trained differ by the adapters only.

What to expect: reward/mean (the mean share of instructions kept) starts around 0.1-0.3 and is noisy at 16
rollouts a step (0.09 0.34 0.44 0.11 0.25 0.25 0.53 0.25 0.50 0.41 0.42 0.38 in the measured run);
verifier_pass/<id> gives it per instruction id and dynamic/kept_frac the share of mixed groups. The base
scores 42.0% instruction-level and 18.9% prompt-level strict on the 132 evaluation prompts; this run's
adapters score 50.7% and 28.0%: +8.7 points instruction-level strict, 95% paired interval [+4.1, +13.5]
(README, "Does it learn?"). With the all-or-nothing reward the same run gained +6.4 [+1.4, +11.5].
The same run with the verdicts from a judge instead of the program: configs/learn_ifeval_judged.py (the 1.5B
judge, met / not met per instruction), learn_ifeval_pairwise.py (the 1.5B comparing rollouts per instruction,
RcRL's win rate) and learn_ifeval_selfjudged.py (the policy's frozen base verifies); everything else is shared
(`rubric_jax.config_base.ifeval_learning`), and all four are measured by the program.
On a GPU or TPU host scale it up (--config.prompts_per_step=8 --config.steps=200
--config.max_completion_len=256 --config.loss.micro_batch_size=16) rather than reading much into the CPU run.
"""

from rubric_jax.config_base import base_config, finalize, ifeval_learning, ifeval_tiny, ifeval_verified


def get_config(arg=None):
    # every constraint has IFEval's checker; one without would be a config error
    c = ifeval_learning(ifeval_verified(base_config(), "program"))
    return finalize(c, arg, tiny=ifeval_tiny)
