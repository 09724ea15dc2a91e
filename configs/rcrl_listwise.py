"""RcRL with listwise group judging: each criterion's win rates come from prompts that show the judge all G
rollouts of a group at once (labelled A, B, ...) instead of every pair in both orders.

  python -m rubric_jax.main --config=configs/rcrl_listwise.py --workdir=/tmp/rcrl_listwise --config.model=/ckpt/Qwen3-4B
  python -m rubric_jax.main --config=configs/rcrl_listwise.py:tiny --workdir=/tmp/rcrl_listwise_tiny     # CPU smoke run

The judge reads its next-token distribution over the G label tokens as a Plackett-Luce first choice, in G
presentation orders that form a Latin square (each rollout shown in each position once), so a constant
preference for a position cancels; listwise win rates average exactly 1/2 in a group like pairwise ones, and
the curriculum, emphasis and advantage math are unchanged (docs/method.md, "Listwise judging"). Per group and
criterion that is G sequences of G responses against G(G-1) sequences of two.

Expect judge/top_agreement (how often one presentation picks the group's consensus best) and
judge/position_spread in the logs next to the usual win_rate_spread/<criterion>. With the embedded 135M judge,
listwise ranking is weaker than pairwise (docs/benchmarks.md, "Listwise against pairwise judging"); it is meant for
judges that can read a whole group, and for measuring that.
"""

from rubric_jax.config_base import base_config, finalize


def get_config(arg=None):
    c = base_config()
    c.judge.comparison = "listwise"
    return finalize(c, arg)
