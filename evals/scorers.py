"""Pointwise scorers for evaluation: each answer scored on each criterion's integer scale, by a model in-process
(rubric_jax's judge engine) or served over an OpenAI-compatible API. The pairwise counterpart is evals.judges.

`make_scorer(spec, cache_dir)` gives an object whose `score(prompt, answers, criteria)` returns a float array
(A, C) of points on each criterion's own scale 0..max_points, NaN where the judge's answer could not be read.
Scores are cached on disk, keyed by (scorer fingerprint, prompt, answer, criterion), so a rerun scores nothing
twice.

How an in-process model scores (`mode`):
  logit     the expected score under the judge's next-token distribution over the allowed scores, renormalised
            (smooth, never unreadable unless they hold less than `min_mass` of the probability); a scale past
            9 (0-10, 0-20) is read digit by digit, one more lane per leading digit of a two-digit score
            (rubric_jax.judge.pointwise_judging.two_digit_probs; tokenizers that split numbers into digits only);
  hard      the most probable allowed score;
  generate  the judge writes a short rationale and a "Score: N" line, which is parsed;
  auto      (default) logit where every criterion's scale fits single-digit tokens (max_points <= 9), generate
            otherwise (a judge's written score, as the suites' papers read it; logit is the fast, deterministic
            choice for those scales on a CPU).
A remote scorer always asks for the scores in text and parses them (rubric_jax.judge.remote.RemoteJudge).
"""

from __future__ import annotations

import abc
import logging
import os
from typing import Sequence

import numpy as np

from evals.generate import DiskCache, _digest
from rubric_jax.rubrics.types import Criterion

log = logging.getLogger(__name__)

MODES = ("auto", "logit", "hard", "generate")
MAX_DIGIT = 9  # the largest score that is one token in the tokenizers we load


def _criterion_key(c: Criterion) -> str:
    return _digest(c.id, c.name, c.check, c.max_points, c.scoring, *c.levels)


class _CachedScorer(abc.ABC):
    name: str
    fingerprint: str

    def __init__(self, cache_dir: str):
        self.cache = DiskCache(cache_dir, "scores")

    def _key(self, prompt: str, answer: str, crit: Criterion) -> str:
        return _digest("score-v1", self.fingerprint, prompt, answer, _criterion_key(crit))

    def score(self, prompt: str, answers: Sequence[str], criteria: Sequence[Criterion]) -> np.ndarray:
        """(len(answers), len(criteria)) points, NaN where unreadable."""
        criteria = list(criteria)
        if not criteria:
            raise ValueError("score: no criteria")
        out = np.full((len(answers), len(criteria)), np.nan)
        missing = np.zeros(out.shape, bool)
        for a, ans in enumerate(answers):
            for c, cr in enumerate(criteria):
                hit = self.cache.get(self._key(prompt, ans, cr))
                if hit is None:
                    missing[a, c] = True
                else:
                    out[a, c] = np.nan if hit["points"] is None else hit["points"]
        rows = np.flatnonzero(missing.any(axis=1))
        if rows.size:
            got = self._score(prompt, [answers[a] for a in rows], criteria)
            for k, a in enumerate(rows):
                for c, cr in enumerate(criteria):
                    if missing[a, c]:
                        v = got[k, c]
                        out[a, c] = v
                        self.cache.put(self._key(prompt, answers[a], cr),
                                       {"points": None if np.isnan(v) else float(v)})
        return out

    @abc.abstractmethod
    def _score(self, prompt: str, answers: list[str], criteria: list[Criterion]) -> np.ndarray:
        """(len(answers), len(criteria)) points for the answers the cache lacks, NaN where unreadable."""


class LocalScorer(_CachedScorer):
    """A model scoring in-process through rubric_jax.judge.Judge.pointwise_batch (one compiled forward)."""

    def __init__(self, spec: str, cache_dir: str, *, mode: str = "auto", max_response_tokens: int = 512,
                 gen_max_new_tokens: int = 96, min_mass: float = 0.0):
        super().__init__(cache_dir)
        if mode not in MODES:
            raise ValueError(f"scorer mode must be one of {MODES}, got {mode!r}")
        from evals.models import LoadedMember, classify

        member = classify(spec)
        if member.shuffled:
            raise ValueError(f"--judge: {spec!r}: a shuffled model cannot judge")
        self.member = LoadedMember(member, cache_dir)
        self.name, self.mode = spec, mode
        self.max_response_tokens, self.gen_max_new_tokens, self.min_mass = (max_response_tokens, gen_max_new_tokens,
                                                                             min_mass)
        from rubric_jax.judge.prompts import PromptConfig

        # the prompt text is part of the key: a changed judge prompt must not be served old scores
        self.fingerprint = _digest("local-scorer-v1", self.member.fingerprint, mode, max_response_tokens,
                                   gen_max_new_tokens, min_mass,
                                   PromptConfig(max_response_tokens=max_response_tokens).fingerprint())
        self._judge = None

    @property
    def judge(self):
        if self._judge is None:
            from rubric_jax.judge.engine import Judge, JudgeConfig

            self._judge = Judge(self.member.model, self.member.tokenizer,
                                JudgeConfig(mode="logit", min_verdict_mass=self.min_mass,
                                            gen_max_new_tokens=self.gen_max_new_tokens),
                                model_id=self.member.fingerprint, max_response_tokens=self.max_response_tokens)
        return self._judge

    def mode_for(self, criteria: Sequence[Criterion]) -> str:
        if self.mode != "auto":
            return self.mode
        return "logit" if max(c.max_points for c in criteria) <= MAX_DIGIT else "generate"

    def _score(self, prompt, answers, criteria):
        mode = self.mode_for(criteria)
        res = self.judge.pointwise_batch([prompt], [list(answers)], criteria, mode=mode)[0]
        return np.where(np.asarray(res.valid, bool), np.asarray(res.scores, np.float64), np.nan)


class RemoteScorer(_CachedScorer):
    """Scores from an OpenAI-compatible endpoint ("openai:MODEL@BASE_URL"), all criteria of an answer in one
    request, parsed from text (`rubric_jax.judge.remote.RemoteJudge.pointwise_batch`); an unparsable score is
    NaN."""

    def __init__(self, spec: str, cache_dir: str, *, timeout_s: float = 120.0, concurrency: int = 8,
                 max_new_tokens: int = 512, **_ignored):
        super().__init__(cache_dir)
        from rubric_jax.judge.remote import RemoteJudge

        self.remote = RemoteJudge.from_spec(spec, timeout_s=timeout_s, concurrency=concurrency,
                                            max_new_tokens=max_new_tokens)
        self.name = spec
        self.fingerprint = _digest("remote-scorer-v1", spec, max_new_tokens)

    def _score(self, prompt, answers, criteria):
        res = self.remote.pointwise_batch([prompt], [list(answers)], list(criteria), seed=0)[0]
        return np.where(np.asarray(res.valid, bool), np.asarray(res.scores, np.float64), np.nan)


def make_scorer(spec: str, cache_dir: str, *, mode: str = "auto", remote: dict | None = None, **kw) -> _CachedScorer:
    """A remote scorer for "openai:MODEL@BASE_URL" (`remote`: timeout_s, concurrency, max_new_tokens), else an
    in-process one (`mode` and `kw` for LocalScorer)."""
    spec = (spec or "").strip()
    if not spec:
        raise ValueError("--judge: empty judge spec")
    cache_dir = os.path.expanduser(cache_dir)
    if spec.startswith("openai:"):
        return RemoteScorer(spec, cache_dir, **(remote or {}))
    return LocalScorer(spec, cache_dir, mode=mode, **kw)


def scale_criterion(id: str, name: str, check: str, max_points: int, low: str, high: str) -> Criterion:
    """A criterion on 0..max_points whose levels run from `low` (0) to `high` (max_points), the ones between
    sharing one description (the judge reads them as one line, "1-19: ...", rubric_jax.judge.prompts), so a
    suite can define a 0-10 or 0-20 scale from two anchor texts."""
    levels = [low] + [f"in between, higher the closer it comes to {max_points}"] * (max_points - 1) + [high]
    return Criterion(id=id, name=name, check=check, levels=tuple(levels), max_points=max_points)
