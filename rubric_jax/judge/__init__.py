"""Self-judging: rubric criteria judged by a frozen copy of the model through its own forward.

Public API (docs/method.md: RcRL, RARE; docs/architecture.md: the judge forward):
    pairwise(model, tokenizer, prompt, responses, criteria, mode="sign") -> p[G, G, C]
    pointwise(model, tokenizer, prompt, responses, criteria, mode="logit") -> (s[G, C], valid[G, C])
    Judge(model, tokenizer, JudgeConfig(...))  for batching prompts, Swiss pairings, cache and stats.
"""

from rubric_jax.judge.cache import JudgmentCache
from rubric_jax.judge.engine import (
    MODES,
    SHARING,
    Judge,
    JudgeConfig,
    JudgeStats,
    PairwiseResult,
    PointwiseResult,
    get_judge,
    pairwise,
    pointwise,
)
from rubric_jax.judge.pairings import PAIRINGS, all_pairs, circular_pairs, num_swiss_rounds, swiss_round
from rubric_jax.judge.prompts import PromptBuilder, PromptConfig, VerdictTokenError

__all__ = ["MODES", "PAIRINGS", "SHARING", "Judge", "JudgeConfig", "JudgeStats", "JudgmentCache",
           "PairwiseResult", "PointwiseResult", "PromptBuilder", "PromptConfig", "VerdictTokenError",
           "all_pairs", "circular_pairs", "get_judge", "num_swiss_rounds", "pairwise", "pointwise",
           "swiss_round"]
