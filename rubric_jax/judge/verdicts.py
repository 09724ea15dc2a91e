"""The one door to a verdict: the `Verdicts` protocol that every judge implements and every user calls.

Two backends stand behind it:

    Judge(model, tokenizer, JudgeConfig(...))     our frozen model through the compiled forward (engine.py)
    RemoteJudge.from_spec("openai:MODEL@URL")      a chat model behind an OpenAI-compatible endpoint (remote.py)

and four kinds of verdict go through it, each returning one result per prompt's group:

    pairwise_batch(prompts, groups, criteria)                          PairwiseResult: p[G, G, C], win_rates[G, C]
    pairwise_batch(..., comparison="listwise")                         the same win rates from whole-group sequences
    pointwise_batch(prompts, groups, criteria, seed=)                  PointwiseResult: scores[G, C], valid[G, C]
    verify_batch(prompts, groups, constraints)                         VerifyResult: p_pass[G, K], valid[G, K]

`criteria` is one rubric for every prompt (a Rubric or a list of Criterion) or one per prompt; `constraints[q]`
holds prompt q's constraint sentences. The trainer's reward phase, `rubric_jax.rewards_api.score_groups`, the TRL
adapter, the evaluation judges and scorers (`evals.judges`, `evals.scorers`), RARE's scorer and RLMR's verifier
all take any object with these methods. docs/method.md section 2 gives the readings (logit, sign, hard,
generate) and how each kind's verdicts become rewards.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from rubric_jax.judge.common import PairwiseResult, PointwiseResult
from rubric_jax.judge.verify import VerifyResult


@runtime_checkable
class Verdicts(Protocol):
    """What a judge answers. Both backends implement every method; a backend refuses, with a ValueError naming
    the other backend, the settings it cannot serve (a remote judge: Swiss pairing, listwise comparison)."""

    def pairwise_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                       mode: str | None = None, pairing: str | None = None, seed: int = 0,
                       group_ids: Sequence[int] | None = None,
                       comparison: str | None = None) -> list[PairwiseResult]: ...

    def pointwise_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                        mode: str | None = None, seed: int = 0) -> list[PointwiseResult]: ...

    def verify_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]],
                     constraints: Sequence[Sequence[str]], *, mode: str | None = None) -> list[VerifyResult]: ...


__all__ = ["Verdicts"]
