"""Pairwise judges for evaluation: in-process (rubric_jax's Judge engine) or remote (OpenAI-compatible API).

Both give, for one prompt and a list of answers, P(first wins) for each requested ordered pair (i, j) (answer i
shown first as "A", answer j second as "B") and criterion. Verdicts are cached on disk, keyed by (judge
fingerprint, prompt, both answers, criterion, order), so a rerun judges nothing twice.

`check_judge(spec)` is what evals.run asks of every judge before any answer is generated: a remote one must
answer one tiny chat request, a local spec must name a loadable model (no weights are read).
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

# The default single overall judgment.
OVERALL = Criterion(
    id="overall",
    name="Overall quality",
    check=("Taking everything into account, which response is the better piece of writing for this task: it does "
           "what the task asks, reads fluently and coherently, and is vivid, original and well crafted."),
)


def parse_criteria(spec: str) -> list[Criterion]:
    """"overall" (one judgment) or "rubric:NAME_OR_PATH" (one judgment per criterion of that rubric), or
    "rubric:NAME_OR_PATH@ID,ID" (those criteria of it, in that order: e.g. the ones a run trained on)."""
    spec = (spec or "overall").strip()
    if spec == "overall":
        return [OVERALL]
    if spec.startswith("rubric:"):
        from rubric_jax.errors import did_you_mean
        from rubric_jax.rubrics import load_rubric

        name, _, ids = spec[len("rubric:"):].partition("@")
        criteria = list(load_rubric(name).criteria)
        if not ids:
            return criteria
        by_id = {c.id: c for c in criteria}
        wanted = [i.strip() for i in ids.split(",") if i.strip()]
        for i in wanted:
            if i not in by_id:
                raise ValueError(f"--criteria: rubric {name!r} has no criterion {i!r}{did_you_mean(i, by_id)}; it "
                                 f"has {', '.join(by_id)}")
        if not wanted or len(set(wanted)) != len(wanted):
            raise ValueError(f"--criteria: {spec!r}: name each criterion once after '@'")
        return [by_id[i] for i in wanted]
    raise ValueError(f"--criteria: expected 'overall' or 'rubric:NAME[@ID,...]', got {spec!r}")


def _criterion_key(c: Criterion) -> str:
    return _digest(c.id, c.name, c.check)


class _CachedJudge(abc.ABC):
    fingerprint: str
    name: str

    def __init__(self, cache_dir: str):
        self.cache = DiskCache(cache_dir, "verdicts")

    def _key(self, prompt, first, second, crit) -> str:
        return _digest("verdict-v1", self.fingerprint, prompt, first, second, _criterion_key(crit), "A-then-B")

    def p_first(self, prompt: str, answers: Sequence[str], pairs: Sequence[tuple[int, int]],
                criteria: Sequence[Criterion]) -> np.ndarray:
        """(len(pairs), C) P(answer i wins | i shown first, j second), for each ordered pair (i, j)."""
        out = np.full((len(pairs), len(criteria)), np.nan)
        keys = {}
        for k, (i, j) in enumerate(pairs):
            for c, cr in enumerate(criteria):
                key = self._key(prompt, answers[i], answers[j], cr)
                keys[k, c] = key
                hit = self.cache.get(key)
                if hit is not None:
                    out[k, c] = hit["p_first"]
        todo = sorted({pairs[k] for (k, c), _ in keys.items() if np.isnan(out[k, c])})
        if todo:
            got = self._judge(prompt, answers, todo, criteria)
            for k, (i, j) in enumerate(pairs):
                for c, cr in enumerate(criteria):
                    if np.isnan(out[k, c]):
                        out[k, c] = got[(i, j)][c]
                        self.cache.put(keys[k, c], {"p_first": float(out[k, c])})
        return out

    @abc.abstractmethod
    def _judge(self, prompt, answers, pairs, criteria) -> dict[tuple[int, int], list[float]]:
        """{(i, j): [P(answer i wins | shown first) per criterion]} for the pairs the cache lacks."""


class LocalJudge(_CachedJudge):
    """A model judged in-process through rubric_jax.judge.Judge (logit mode: softmax over the two labels)."""

    def __init__(self, spec: str, cache_dir: str, *, max_response_tokens: int = 512, questions: str = "better"):
        super().__init__(cache_dir)
        from rubric_jax.judge.common import QUESTIONS

        if questions not in QUESTIONS:
            raise ValueError(f"--judge_questions: expected one of {', '.join(QUESTIONS)}, got {questions!r}")
        from evals.models import LoadedMember, classify

        member = classify(spec)  # any loadable spec; a trained model judges through its merged weights
        if member.shuffled:
            raise ValueError(f"--judge: {spec!r}: a shuffled model cannot judge")
        self.member = LoadedMember(member, cache_dir)
        self.name = spec
        from rubric_jax.judge.prompts import PromptConfig

        # the prompt text is part of the key: a changed judge prompt must not be served old verdicts
        # (the default question keeps its old key, so verdicts cached before the option existed still serve)
        self.fingerprint = _digest("local-judge-v1", self.member.fingerprint, max_response_tokens,
                                   PromptConfig(max_response_tokens=max_response_tokens).fingerprint(),
                                   *([] if questions == "better" else [f"questions={questions}"]))
        self.max_response_tokens = max_response_tokens
        self.questions = questions
        self._judge_obj = None

    @property
    def judge(self):
        if self._judge_obj is None:
            from rubric_jax.judge.engine import Judge, JudgeConfig

            self._judge_obj = Judge(self.member.model, self.member.tokenizer,
                                    JudgeConfig(mode="logit", questions=self.questions),
                                    model_id=self.member.fingerprint, max_response_tokens=self.max_response_tokens)
        return self._judge_obj

    def _judge(self, prompt, answers, pairs, criteria):
        # The engine judges every pair of the group in both orders, sharing each first answer's prefix.
        # Only answers that appear in `pairs` are sent.
        used = sorted({i for p in pairs for i in p})
        pos = {a: k for k, a in enumerate(used)}
        res = self.judge.pairwise_batch([prompt], [[answers[i] for i in used]], list(criteria), mode="logit",
                                        pairing="all")[0]
        if self.questions != "better":
            # a pooled or inverted reading is one preference per pair, the same in both orders: p(i > j)
            return {(i, j): [float(res.p[pos[i], pos[j], c]) for c in range(len(criteria))] for i, j in pairs}
        pf, valid = res.p_first, res.valid
        out = {}
        for i, j in pairs:
            a, b = pos[i], pos[j]
            vals = []
            for c in range(len(criteria)):
                if valid[a, b, c]:
                    vals.append(float(pf[a, b, c]))
                elif valid[b, a, c]:
                    vals.append(1.0 - float(pf[b, a, c]))  # what the other order implies
                else:
                    vals.append(0.5)
            out[(i, j)] = vals
        return out


# ---- remote -------------------------------------------------------------------------------------------

class RemoteJudge(_CachedJudge):
    """A judge served over an OpenAI-compatible chat API ("openai:MODEL@BASE_URL"), through
    `rubric_jax.judge.remote.RemoteJudge` (its prompt, client and readout)."""

    def __init__(self, spec: str, cache_dir: str, *, max_chars: int = 6000, **client_kw):
        """client_kw: ChatClient settings (timeout_s, max_retries, backoff_s, concurrency)."""
        super().__init__(cache_dir)
        from rubric_jax.judge.remote import PAIR_SYSTEM, PAIR_USER
        from rubric_jax.judge.remote import RemoteJudge as Backend
        from rubric_jax.openai_client import ChatClient

        self.backend = Backend(ChatClient.from_spec(spec, cache_dir=os.path.join(cache_dir, "chat"), **client_kw),
                               model_id=spec, pair_max_chars=max_chars)
        self.name = spec
        self.max_chars = max_chars
        # No weights to hash: the served model is identified by its name and URL.
        self.fingerprint = _digest("remote-judge-v1", spec, PAIR_SYSTEM, PAIR_USER, max_chars)

    @property
    def client(self):
        """The backend's ChatClient (settable: a test may put a stand-in in its place)."""
        return self.backend.client

    @client.setter
    def client(self, client):
        self.backend.client = client

    def _judge(self, prompt, answers, pairs, criteria):
        got = self.backend.ordered_pairs(prompt, answers, list(pairs), list(criteria))
        raw = {(pair, c): got[k, c] for k, pair in enumerate(pairs) for c in range(len(criteria))}
        out = {p: [0.5] * len(criteria) for p in pairs}
        for ((i, j), c), v in raw.items():
            if np.isnan(v):  # unreadable: what the other order implies, else a tie
                w = raw.get(((j, i), c))
                v = 0.5 if w is None or np.isnan(w) else 1.0 - w
                log.warning("remote judge: unreadable verdict for a pair; using %.2f", v)
            out[(i, j)][c] = float(v)
        return out


class JudgeUnavailable(RuntimeError):
    """A remote judge did not answer its test request; the message names the judge spec."""


# The test request may wait out a 429 or a restarting server, but not the run's full retry budget: with the
# default 5 retries a dead endpoint would take about a minute of backoff to report.
from rubric_jax.openai_client import TEST_MAX_RETRIES as CHECK_MAX_RETRIES  # noqa: E402


def check_judge(spec: str, *, contact: bool = True, timeout_s: float = 60.0,
                max_retries: int = CHECK_MAX_RETRIES, backoff_s: float = 1.0) -> str:
    """Checks a judge spec before any work; returns a one-line description of what was checked.

    "openai:MODEL@BASE_URL": the spec is parsed, then (with `contact`) one chat request of one token ("Reply
    with A.") goes through the shared client, without its cache (a cached answer would hide a dead endpoint),
    with at most `max_retries` retries (capped at CHECK_MAX_RETRIES); it fails with `JudgeUnavailable` when
    the endpoint, model name or key is wrong. Anything else must name a loadable, unshuffled model
    (`evals.models.classify`); no weights are read, loading happens when the judge first judges. A bad spec
    is a ValueError naming it.
    """
    spec = (spec or "").strip()
    if not spec:
        raise ValueError("--judge: empty judge spec")
    if spec.startswith("openai:"):
        from rubric_jax.openai_client import ChatClient, ChatError, test_request

        try:
            ChatClient.from_spec(spec)  # parsed first: a typo is named without a network wait
        except ValueError as e:
            raise ValueError(f"--judge {spec!r}: {e}") from None
        if not contact:
            return f"judge {spec}: not contacted"
        try:
            test_request(spec, timeout_s=timeout_s, max_retries=max_retries, backoff_s=backoff_s)
        except ChatError as e:
            raise JudgeUnavailable(f"judge {spec!r} did not answer a test request: {e}") from None
        return f"judge {spec}: answered a test request"
    from evals.models import ModelSpecError, classify

    try:
        member = classify(spec)
    except ModelSpecError as e:
        raise ValueError(f"--judge: {e}") from None
    if member.shuffled:
        raise ValueError(f"--judge: {spec!r}: a shuffled model cannot judge")
    return f"judge {spec}: {member.kind} model {member.path}"


def make_judge(spec: str, cache_dir: str, *, remote: dict | None = None, **kw) -> _CachedJudge:
    """An OpenAI-compatible judge for "openai:MODEL@BASE_URL" (ChatClient settings from `remote`), else an
    in-process one (`kw` for LocalJudge)."""
    spec = spec.strip()
    if not spec:
        raise ValueError("--judge: empty judge spec")
    if spec.startswith("openai:"):
        return RemoteJudge(spec, cache_dir, **(remote or {}))
    return LocalJudge(spec, cache_dir, **kw)


def suite_judge(args, spec: str, cache_dir: str) -> _CachedJudge:
    """The judge a suite asks its pairwise questions through: the remote client settings and the in-process
    question (--judge_questions; preflight refuses anything but "better" for a remote judge) from the command
    line, so every suite reads a judge the same way."""
    if spec.strip().startswith("openai:"):
        return make_judge(spec, cache_dir, remote=dict(timeout_s=args.remote_timeout, max_retries=args.remote_retries,
                                                       concurrency=args.remote_concurrency))
    return make_judge(spec, cache_dir, questions=getattr(args, "judge_questions", "better") or "better")
