"""Integer rubric scores for RARE: every (response, criterion) cell gets a score in the criterion's own scale
or is marked invalid, never a fractional expected value.

"RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", section 3: the judge
returns s_ij in {0..m_j} and saturation means every rollout at exactly m_j. An expected score (the logit
readout) approaches m_j but never reaches it, so nothing would ever saturate: RARE reads scores hard.

How a cell is read (docs/method.md §3):
  1. the primary mode: "hard" (argmax over the criterion's allowed digit tokens; unreadable when those digits
     hold less than `min_score_mass` of the next-token probability) or "generate" (a short rationale, then
     "Score: N"; unreadable when no allowed score parses);
  2. an unreadable cell is retried once in generate mode, sampled with a seed of its own;
  3. still unreadable: invalid, scored 0 (RARE's reward keeps the denominator, so an invalid cell costs its
     criterion's points) and counted in the step's metrics.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol, Sequence

import numpy as np

from rubric_jax.rubrics import Rubric

log = logging.getLogger(__name__)

SCORE_MODES = ("hard", "generate")


@dataclasses.dataclass
class GroupScores:
    """One group's integer scores under its rubric."""

    scores: np.ndarray  # (G, C) int32; 0 where invalid
    valid: np.ndarray  # (G, C) bool
    max_points: np.ndarray  # (C,) m_c of the rubric the scores are under
    retried: int = 0  # cells read again in generate mode
    recovered: int = 0  # of which the retry could read


class Scorer(Protocol):
    """Scores each group's responses under that group's rubric (the rubrics may differ per group)."""

    def score(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], rubrics: Sequence[Rubric], *,
              seed: int) -> list[GroupScores]: ...


class RubricScorer:
    """Scores each group under its rubric through any judge (`rubric_jax.judge.Verdicts`): `Judge`, the
    in-process engine on the frozen base by default, or `RemoteJudge` (an OpenAI-compatible endpoint).

    `verdicts` reads in `mode` ("hard" or "generate"; a remote judge reads "generate", its retry inside it);
    `retry_judge` is a local generate-mode judge that samples (temperature > 0, so a new seed is a new
    attempt) and shares the model. A local judge goes through the same compiled forward as training.
    """

    def __init__(self, verdicts, retry_judge=None, *, mode: str = "hard"):
        if mode not in SCORE_MODES:
            raise ValueError(f"rare.score_mode must be one of {SCORE_MODES}, got {mode!r}")
        self.verdicts, self.retry_judge, self.mode = verdicts, retry_judge, mode

    @property
    def judge(self):
        """The local judge engine, whose shapes the trainer plans (None for a remote judge)."""
        from rubric_jax.judge import Judge  # noqa: PLC0415 (the engine imports the models)

        return self.verdicts if isinstance(self.verdicts, Judge) else None

    def __repr__(self) -> str:
        return f"RubricScorer({self.verdicts!r}, mode={self.mode!r})"

    def score(self, prompts, responses, rubrics, *, seed: int) -> list[GroupScores]:
        crits = [list(r.criteria) for r in rubrics]
        res = self.verdicts.pointwise_batch(list(prompts), [list(x) for x in responses], crits, mode=self.mode,
                                            seed=seed)
        out = []
        for r, rub in zip(res, rubrics):
            out.append(GroupScores(np.rint(r.scores).astype(np.int32), np.asarray(r.valid, bool).copy(),
                                   np.asarray(rub.max_points, np.int32), retried=int(r.metrics.get("retried", 0)),
                                   recovered=int(r.metrics.get("recovered", 0))))
        if self.retry_judge is not None:
            self._retry(prompts, responses, rubrics, out, seed)
        for gs in out:
            gs.scores = np.where(gs.valid, gs.scores, 0).astype(np.int32)
        return out

    def _retry(self, prompts, responses, rubrics, out: list[GroupScores], seed: int) -> None:
        """One generate-mode attempt per unreadable cell, each (prompt, response) with its unreadable criteria."""
        jobs = []  # (group, response index, criterion columns)
        for b, gs in enumerate(out):
            for a in range(gs.valid.shape[0]):
                cols = np.flatnonzero(~gs.valid[a])
                if cols.size:
                    jobs.append((b, a, cols))
        if not jobs:
            return
        # the retry's seed differs from the primary call's (a generate-mode primary would repeat itself)
        res = self.retry_judge.pointwise_batch(
            [prompts[b] for b, _, _ in jobs], [[responses[b][a]] for b, a, _ in jobs],
            [[rubrics[b].criteria[c] for c in cols] for b, _, cols in jobs], mode="generate",
            seed=int(seed) * 2 + 1)
        for (b, a, cols), r in zip(jobs, res):
            gs = out[b]
            gs.retried += cols.size
            ok = np.asarray(r.valid[0], bool)
            gs.recovered += int(ok.sum())
            gs.scores[a, cols[ok]] = np.rint(r.scores[0, ok]).astype(np.int32)
            gs.valid[a, cols[ok]] = True


class RemoteScorer(RubricScorer):
    """RARE's training judge at an OpenAI-compatible endpoint: a `RubricScorer` over a `RemoteJudge` (one request
    per response with all its rubric's criteria, read by `rubric_jax.judge.readout.read_scores_text`, one
    retry request per response with unreadable cells). `judge_or_client`: a RemoteJudge, or a ChatClient with
    `kw` for the RemoteJudge built on it."""

    def __init__(self, judge_or_client, **kw):
        from rubric_jax.judge.remote import RemoteJudge  # noqa: PLC0415

        judge = judge_or_client if isinstance(judge_or_client, RemoteJudge) else RemoteJudge(judge_or_client, **kw)
        super().__init__(judge, mode="generate")

    @classmethod
    def from_spec(cls, spec: str, **kw) -> "RemoteScorer":
        """"openai:MODEL@BASE_URL" (key from OPENAI_API_KEY); `kw`: `RemoteJudge.from_spec`'s."""
        from rubric_jax.judge.remote import RemoteJudge  # noqa: PLC0415

        return cls(RemoteJudge.from_spec(spec, **kw))
