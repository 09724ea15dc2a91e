"""A judge double that reads word order, for the suites' "a model beats its shuffled copy" checks.

The embedded 135M judge cannot separate an answer from its word-shuffled copy on pointwise rubric items
(docs/judge.md, "Judge fidelity"), so the real tiny runs of the suites assert only that they run and agree with
themselves. These doubles stand in for a judge that can: an answer's coherence is the share of its adjacent
word pairs that also occur, in that order, in the coherent answers of the run; every criterion gets
coherence x its maximum, and a pairwise reading prefers the more coherent answer. Whatever a suite does with
the judge's numbers must then rank the coherent model above its shuffled copy."""

from __future__ import annotations

import numpy as np

from evals.generate import shuffle_words


def coherent_answer(prompt: str, k: int) -> str:
    """A made-up answer with many distinct word pairs (so a shuffle breaks most of them)."""
    words = [f"{w}{k}" for w in prompt.lower().replace("?", " ").replace(".", " ").split()[:6]]
    return " ".join(words + ["then", "the", "story", "moved", "on", "to", "its", "quiet", "end", f"n{k}"])


class Member:
    """What the suites read off a loaded contestant besides generation: an (absent) tokenizer."""

    def __init__(self, name: str):
        self.name, self.tokenizer = name, None


class Contest:
    """Answers for "base" (coherent) and any other name (base's answers, word-shuffled)."""

    def __init__(self):
        self.bigrams: set[tuple[str, str]] = set()

    def answers(self, member, prompts, **_):
        base = [coherent_answer(p, k) for k, p in enumerate(prompts)]
        for a in base:
            w = a.split()
            self.bigrams |= set(zip(w, w[1:]))
        return base if member.name == "base" else [shuffle_words(a, 0) for a in base]

    def coherence(self, text: str) -> float:
        w = text.split()
        pairs = list(zip(w, w[1:]))
        return sum(p in self.bigrams for p in pairs) / max(len(pairs), 1)


class Scorer:
    fingerprint = "coherence-double"

    def __init__(self, contest: Contest):
        self.contest = contest

    def score(self, prompt, answers, criteria):
        return np.array([[self.contest.coherence(a) * c.max_points for c in criteria] for a in answers])


class Judge:
    fingerprint = "coherence-double"

    def __init__(self, contest: Contest):
        self.contest = contest

    def p_first(self, prompt, answers, pairs, criteria):
        """P(i wins | i shown first): 0.5 plus 0.45 x the coherence difference (a judge with no position bias)."""
        coh = [self.contest.coherence(a) for a in answers]
        return np.array([[0.5 + 0.45 * (coh[i] - coh[j])] * len(criteria) for i, j in pairs])


def install(monkeypatch) -> Contest:
    """Routes the suites' generation, scorer and judge through the doubles; returns the shared contest."""
    import evals.generate
    import evals.judges
    import evals.models
    import evals.scorers

    contest = Contest()
    monkeypatch.setattr(evals.models, "load_contestants", lambda cs, *a, **k: {c.name: [Member(c.name)] for c in cs})
    monkeypatch.setattr(evals.generate, "generate_answers", lambda member, prompts, **k: contest.answers(member, prompts))
    monkeypatch.setattr(evals.scorers, "make_scorer", lambda *a, **k: Scorer(contest))
    monkeypatch.setattr(evals.judges, "make_judge", lambda *a, **k: Judge(contest))
    return contest
