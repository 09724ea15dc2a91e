"""configs/learn_ifeval.py with the verdicts from the policy's own frozen base: the papers' self-judging setting.

The same as configs/learn_ifeval_judged.py (RLMR's LLM verifier, reward the share of the instructions judged
kept, everything else learn_ifeval.py's) except that the verifier is SmolLM2-135M-Instruct itself, frozen at its
starting weights (judge.model="", the default of every method here): the setting "Rubric Curriculum RL" calls
exploiting the generation-verification gap, at the scale this machine trains. The programs run beside the
reward for the log only (judge/program_agreement, per id judge/program_agreement/<id>).

  python -m rubric_jax.main --config=configs/learn_ifeval_selfjudged.py --workdir=/tmp/learn_ifeval_selfjudged
  python -m evals.ifeval --models=base=smollm2-135m-instruct,trained=/tmp/learn_ifeval_selfjudged --out=/tmp/self_eval
  python -m rubric_jax.main --config=configs/learn_ifeval_selfjudged.py:tiny --workdir=/tmp/self_tiny  # smoke run

What to expect: a 135M verifier reads instructions far worse than a program; judge/program_agreement says how
far, and the IFEval evaluation whether what it rewards still teaches.
"""

from rubric_jax.config_base import base_config, finalize, ifeval_learning, ifeval_tiny, ifeval_verified


def get_config(arg=None):
    c = ifeval_learning(ifeval_verified(base_config(), "llm"))
    c.judge.model = ""  # the policy's frozen base judges
    return finalize(c, arg, tiny=ifeval_tiny)
