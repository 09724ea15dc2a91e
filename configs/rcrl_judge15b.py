"""RcRL with a judge that reads: the embedded SmolLM2-135M-Instruct policy, judged by the embedded 1.5B Qwen2.5
instruct model (a frozen model apart from the policy, with its own tokenizer), sized for a 2-core CPU.

  python -m rubric_jax.main --config=configs/rcrl_judge15b.py --workdir=/tmp/rcrl_judge15b
  python -m evals.run --suite=pairwise_elo --models=base=smollm2-135m-instruct,trained=/tmp/rcrl_judge15b \
      --judge=qwen2.5-coder-1.5b-instruct --prompts=24 --max_new_tokens=96 --out=/tmp/rcrl_judge15b_elo
  python -m evals.curves --workdir=/tmp/rcrl_judge15b --out=/tmp/rcrl_judge15b_curves
  python -m rubric_jax.main --config=configs/rcrl_judge15b.py:tiny --workdir=/tmp/rcrl_judge15b_tiny   # smoke run

The reward is RcRL's (docs/method.md §2): per active criterion every pair of a group's rollouts is judged in
both orders, the win rates are weighted with emphasis on the newest criterion, and one criterion joins every
`reward.interval` steps in the rubric's order (prompt_alignment, then plot_coherence, then character_depth).
The judge answers both pairwise questions ("which is better", "which is worse") and pools them
(judge.questions="both"; docs/judge.md, "A judge apart from the policy"): on the tuning kinds of the judge-fidelity
study the 1.5B orders 0.94 of the pairs that way against 0.58 with the first question alone. The evaluation is
another matter: the second command rates trained against base on held-out prompts (evals/data, never trained
on) with the same 1.5B asked a plain overall-quality question, both orders, bootstrap intervals, and a
length-controlled rating beside it.

Sized to finish with its evaluation within 90 minutes on 2 CPU cores, where the judge is the cost: the 1.5B
reads every (first response, second response, criterion) of a group, about 3,000 tokens per criterion for
G = 4 rollouts of <= 80 tokens, twice for the two questions. The choices:

  - 1 prompt x G = 4 rollouts per step: 6 pairs, 12 ordered judgments per criterion and question;
  - completions <= 80 tokens (a short scene: SmolLM2's stories run on, and the judge sees each one whole);
  - 32 steps; the curriculum adds a criterion every 14 steps, so the run sees the first three criteria (the
    third for its last 4 steps). Measured on this CPU: about 55 s a step with one or two criteria, but about
    210 s with three, where the judge's scoring falls back to its largest compiled shape (26,112 padded tokens
    for 30% real ones; `time/judge_padded_tokens`); 32 steps keep training plus evaluation within 90 minutes;
  - the judge's weights in bfloat16: one group's judging with one criterion took 40 s against 66 s in float32
    on this CPU (its fidelity figures were measured in float32);
  - judge.mode="sign" (the paper's discrete verdicts): with G = 4 a group's win rates are 0, 1/3, 2/3 or 1, a
    spread that a few dozen updates can act on;
  - LoRA r = 16, alpha = 32, no dropout, lr 2e-4 constant after 2 warmup steps (as configs/learn_ifeval.py:
    the steps are few, so each must move the adapters); GRPO advantages normalised by the group's std and a
    token-mean loss, so the update's size does not shrink with the judge's margins;
  - KL to the base with coefficient 0.01 (k3): small enough not to hold the policy back, and it puts the KL
    curve in the log (`kl`) for `evals.curves`.

What to expect: reward/mean is 0.5 by construction (win rates within a group); the signal is reward/std and
win_rate_spread/<criterion>; judge/order_agreement says how often the two presentation orders agree.
"""

from rubric_jax.config_base import base_config, finalize

JUDGE = "qwen2.5-coder-1.5b-instruct"


def _tiny(c):
    """:tiny: tiny_overrides' 2 prompts x G = 2 for 2 steps, judged by the policy itself (CI has no 1.5B)."""
    c.judge.model, c.judge.dtype = "", ""
    return c


def get_config(arg=None):
    c = base_config()
    c.model = "smollm2-135m-instruct"
    c.dtype = "float32"
    c.judge.model = JUDGE
    c.judge.dtype = "bfloat16"
    c.judge.questions = "both"
    c.judge.mode = "sign"
    c.judge.max_response_tokens = 96
    c.steps = 32
    c.prompts_per_step = 1
    c.group_size = 4
    c.max_prompt_len = 128
    c.max_completion_len = 80
    c.reward.interval = 14
    c.lora.rank, c.lora.alpha, c.lora.dropout = 16, 32.0, 0.0
    c.optim.lr, c.optim.warmup_steps, c.optim.schedule = 2e-4, 2, "constant"
    c.loss.advantage, c.loss.aggregation = "grpo", "token_mean"
    c.loss.kl_coef, c.loss.kl_kind = 0.01, "k3"
    c.loss.micro_batch_size = 4
    c.forward.remat = "none"
    c.forward.attention = "plain"
    c.checkpoint.every = 4
    return finalize(c, arg, tiny=_tiny)
