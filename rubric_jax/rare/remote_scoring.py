"""RARE's training judge over an OpenAI-compatible chat endpoint: `RemoteScorer`, a drop-in `Scorer`.

"RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation" trains with a strong
external judge. `LocalScorer` (scoring.py) reads our own frozen model; this module asks any chat server that
speaks the OpenAI protocol (OpenAI itself, vLLM, llama.cpp, `python -m rubric_jax.serve`) through the project's
`ChatClient`, and returns the same `GroupScores`.

What a cell holds. For group b, response i and criterion j of that group's rubric:

    s_ij in allowed(j)   allowed(j) = {0, 1, .., m_j}, or {0, m_j} for a binary criterion
    valid_ij             whether the judge's answer could be read

  1. one request per response (all of its rubric's criteria in it) at `temperature`;
  2. a cell is unreadable when its criterion's line is missing, its number is not an allowed score (so a
     binary criterion rejects in-between values) or the answer gives two different scores for it; a request
     that fails outright (`ChatError` after the client's own retries) leaves all of its cells unreadable;
  3. with `retry`, each response with unreadable cells gets ONE more request holding only those criteria, with
     a seed of its own (derived from `seed` and the response's position) and temperature max(temperature, 0.7),
     so that a greedy server does not just write the same answer again;
  4. still unreadable: valid_ij = False and s_ij = 0 (RARE's reward keeps m_j in the denominator, so an
     invalid cell costs its points), counted in `retried` / `recovered` as LocalScorer does.

Why one request per response rather than per cell: the paper's judge reads the rubric as a whole and scores
every criterion of it for one response at a time; asking per cell would send the same (possibly long)
response C times. All C criteria travel in one prompt, and the instructions ask for an independent judgment
per criterion so that one criterion's score does not drag the others.

Answer format: one line per criterion, `<criterion id>: <score>`, and nothing else. No reasons are asked for:
the output then stays around 8 tokens a criterion (max_new_tokens=256 leaves room for ~30 criteria, never
cutting off the last ones), and the paper's judge returns only the integer s_ij. A judge that explains anyway
still parses: text that is not a score line is ignored (see `parse_scores`).

Cost per training step with B groups of G responses: B*G requests in one concurrent batch (plus at most one
retry per response with unreadable cells, in a second batch), each carrying the task, one response and the
whole rubric, and asking for C short lines. Sample-level rubric replacements add one more score() call over
the accepted groups with only the new criteria (sample_level.step).

Failures: a request the client gives up on is logged (at most two warnings per batch, and one example of an
unreadable answer per call at debug level; the client already redacts the API key, and everything this module
logs or raises goes through the client's `redact` again) and its cells become unreadable. When
every request of a score() call fails, the endpoint is down: `RemoteJudgeUnavailable` is raised so that
training stops instead of learning from a reward of zero.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Sequence

import numpy as np

from rubric_jax.openai_client import ChatClient, ChatError, Completion, redact, run_sync
from rubric_jax.rare.scoring import GroupScores
from rubric_jax.rubrics import Criterion, Rubric

log = logging.getLogger(__name__)

RETRY_MIN_TEMPERATURE = 0.7

SYSTEM = ("You are a careful grader. You grade one response to a task against a list of criteria. Judge every "
          "criterion on its own, independently of the others, and give each one integer score chosen from that "
          "criterion's allowed scores.")

USER = ("### Task\n{prompt}\n\n### Response\n{response}\n\n### Criteria\n{criteria}\n\n### How to answer\n"
        "Grade the response on each criterion above independently. Reply with exactly one line per criterion, "
        "in the order listed, of the form `<criterion id>: <score>`, where the score is one of that criterion's "
        "allowed scores, and write nothing else:\n{template}")

EMPTY_RESPONSE = "(the response is empty)"


class RemoteJudgeUnavailable(RuntimeError):
    """Every request of a score() call failed: the judge endpoint is down or refuses us."""


# ---- prompt ----------------------------------------------------------------------------------------------------

def allowed_scores_text(c: Criterion) -> str:
    if c.scoring == "binary":
        return f"0 or {c.max_points} only"
    scores = [str(s) for s in c.scores]
    return ", ".join(scores[:-1]) + f" or {scores[-1]}"


def criterion_block(c: Criterion) -> str:
    levels = "\n".join(f"- {s}: {c.level_text(s)}" for s in c.scores)
    return (f"Criterion id: {c.id}\nName: {c.name}\nCheck: {c.check}\nAllowed scores: {allowed_scores_text(c)}\n"
            f"Levels:\n{levels}")


def cut_text(text: str, max_chars: int) -> str:
    """`text` cut to max_chars characters, with a marker saying how much the judge does not see."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... response cut here: {len(text) - max_chars} more characters not shown ...]"


def build_messages(prompt: str, response: str, criteria: Sequence[Criterion], *,
                   max_response_chars: int = 24000) -> list[dict]:
    """The chat messages of one request: the task, one response and the criteria to grade it on."""
    shown = cut_text(response, max_response_chars) if response.strip() else EMPTY_RESPONSE
    user = USER.format(prompt=prompt, response=shown,
                       criteria="\n\n".join(criterion_block(c) for c in criteria),
                       template="\n".join(f"{c.id}: <score>" for c in criteria))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


# ---- answer ----------------------------------------------------------------------------------------------------

# Markdown emphasis and code marks can wrap the id or the number anywhere on a line; they carry no meaning here.
_MARKUP = str.maketrans("", "", "`*")
# A list bullet, a numbering ("1." / "2)") or a heading mark may start the line.
_LEAD = r"^\s*(?:[-+\u2022>]\s*|\d+[.)]\s+|#+\s*)?"
# The id may be quoted/bracketed and followed by its name in parentheses or after a dash, before the ":"/"=".
_AFTER_ID = r"(?:__)?[\"'\]>)]?\s*(?:\([^)]*\)|[-\u2013\u2014][^:=]*)?\s*[:=]\s*(?P<val>.*)$"
_VALUE = re.compile(r"^(?:score\s*[:=]?\s*)?(?P<n>\d+)(?P<rest>.*)$", re.IGNORECASE)
_OUT_OF = re.compile(r"^\s*(?:/|out\s+of)\s*\d+", re.IGNORECASE)
# "3.5", "2-3", "3 or 4": a number that is not one integer score
_NOT_ONE_INT = re.compile(r"^\s*(?:[.,]\d|[-\u2013\u2014~]\s*\d|(?:to|or|and)\s+\d)", re.IGNORECASE)


def _id_pattern(cid: str) -> re.Pattern:
    return re.compile(_LEAD + r"[\"'\[<(]?(?:__)?" + re.escape(cid) + _AFTER_ID, re.IGNORECASE)


def _read_value(val: str) -> tuple[bool, int | None]:
    """(is this a score at all, the integer or None when it is a malformed one)."""
    m = _VALUE.match(val.strip())
    if not m:
        return False, None  # e.g. a reason written on the id's line: not a score, ignored
    rest = _OUT_OF.sub("", m["rest"], count=1)
    if _NOT_ONE_INT.match(rest):
        return True, None
    return True, int(m["n"])


def read_answer(text: str, criteria: Sequence[Criterion]) -> list[tuple[int | None, str]]:
    """Per criterion, in order: (score, "") or (None, why it is unreadable)."""
    patterns = [(c, _id_pattern(c.id)) for c in criteria]
    found: dict[str, list[int | None]] = {c.id: [] for c in criteria}
    for line in text.translate(_MARKUP).splitlines():
        hits = [(c, m) for c, p in patterns if (m := p.match(line))]
        if not hits:
            continue
        c, m = max(hits, key=lambda h: len(h[0].id))  # "c1" never shadows "c1_extra"
        is_score, value = _read_value(m["val"])
        if is_score:
            found[c.id].append(value)
    out = []
    for c in criteria:
        got = found[c.id]
        if not got:
            out.append((None, "missing"))
        elif None in got:
            out.append((None, "not an integer score"))
        elif len(set(got)) > 1:
            out.append((None, f"ambiguous ({sorted(set(got))})"))
        elif got[0] not in c.scores:
            out.append((None, f"{got[0]} is not an allowed score ({allowed_scores_text(c)})"))
        else:
            out.append((got[0], ""))
    return out


def parse_scores(text: str, criteria: Sequence[Criterion]) -> list[int | None]:
    """Each criterion's score from an answer, None where unreadable.

    A score line is `<id>: <n>` (or `=`), matched case-insensitively; backticks and asterisks anywhere, a
    leading bullet or number, quotes/brackets around the id, the criterion's name after it ("id (Name): 3"),
    "Score: 3" and a trailing "/ m" or "out of m" are tolerated. Lines that are not score lines are ignored;
    so is an id's line whose value does not start with a number (a reason). A cell is unreadable when its id
    has no score line, a score line holds no single integer ("3.5", "2-3"), two lines give different scores,
    or the score is not allowed (binary criteria: 0 or m only).
    """
    return [s for s, _ in read_answer(text, criteria)]


# ---- the scorer ------------------------------------------------------------------------------------------------

def request_seed(seed: int, group: int, response: int, attempt: int) -> int:
    """A reproducible per-request seed (31 bits, as servers expect), different for each attempt."""
    words = [int(seed) & 0xFFFFFFFFFFFFFFFF, group, response, attempt]
    return int(np.random.SeedSequence(words).generate_state(1)[0] & 0x7FFFFFFF)


class RemoteScorer:
    """Scores each group's responses under its rubric with a chat model behind an OpenAI-compatible endpoint.

    client: a `ChatClient` (its concurrency, retries, timeout and cache apply to every request).
    max_response_chars: each response is cut to this many characters, with a visible marker.
    max_new_tokens, temperature: of the first request per response (the retry samples at >= 0.7).
    retry: one more request per response with unreadable cells, holding only those criteria.

    `judge` is None (no in-process judge engine, so no padding statistics) and `model_id` names the endpoint.
    """

    judge = None

    def __init__(self, client: ChatClient, *, max_response_chars: int = 24000, max_new_tokens: int = 256,
                 temperature: float = 0.0, retry: bool = True, model_id: str | None = None):
        if max_response_chars < 1 or max_new_tokens < 1:
            raise ValueError(f"max_response_chars and max_new_tokens must be >= 1, got {max_response_chars}, "
                             f"{max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.client = client
        self.max_response_chars = int(max_response_chars)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.retry = bool(retry)
        self.model_id = model_id or f"openai:{client.model}@{client.base_url}"

    @classmethod
    def from_spec(cls, spec: str, *, timeout_s: float = 120.0, concurrency: int = 8, max_new_tokens: int = 256,
                  max_retries: int = 5, backoff_s: float = 1.0, cache_dir: str | None = None,
                  **kw) -> "RemoteScorer":
        """"openai:MODEL@BASE_URL" (key from OPENAI_API_KEY); `kw` goes to the constructor."""
        client = ChatClient.from_spec(spec, timeout_s=timeout_s, concurrency=concurrency, max_retries=max_retries,
                                      backoff_s=backoff_s, cache_dir=cache_dir)
        return cls(client, max_new_tokens=max_new_tokens, model_id=spec, **kw)

    def __repr__(self) -> str:
        return f"RemoteScorer({self.model_id!r}, temperature={self.temperature}, retry={self.retry})"

    # ---- requests ----------------------------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        # the shared redaction, with the key of whichever variable this client reads (a test's stand-in
        # client may not be a ChatClient, hence the default)
        return redact(text, [os.environ.get(getattr(self.client, "api_key_env", "OPENAI_API_KEY"))])

    def _request(self, prompt: str, response: str, criteria: Sequence[Criterion], *, seed: int,
                 temperature: float) -> dict:
        return {"messages": build_messages(prompt, response, criteria, max_response_chars=self.max_response_chars),
                "max_tokens": self.max_new_tokens, "temperature": temperature, "seed": seed}

    def _chat(self, requests: list[dict], desc: str) -> list[Completion | ChatError]:
        """Every request's completion, or the ChatError it ended with; never raises ChatError.

        chat_many is all-or-nothing (one failure cancels the batch), so after a failure the batch is sent again
        request by request with failures kept apart. Completions already received are then asked again (hits
        when the client has a cache), which only happens on the failure path.
        """
        if not requests:
            return []
        try:
            return list(self.client.chat_many(requests, desc=desc))
        except ChatError as e:
            if len(requests) == 1:
                return [e]
            log.warning("remote judge %s: a request failed (%s); sending the %d requests of this batch one by "
                        "one to keep the others", self.model_id, self._redact(str(e))[:300], len(requests))

        async def each():
            async def one(kw):
                try:
                    return await self.client.achat(**kw)
                except ChatError as err:
                    return err
            return await asyncio.gather(*(one(kw) for kw in requests))

        return list(run_sync(each))

    def _report_failures(self, outs: list, what: str) -> int:
        errors = [o for o in outs if isinstance(o, ChatError)]
        if errors:
            log.warning("remote judge %s: %d of %d %s requests failed; their cells are unreadable. First error: %s",
                        self.model_id, len(errors), len(outs), what, self._redact(str(errors[0]))[:300])
        return len(errors)

    # ---- scoring -----------------------------------------------------------------------------------------------
    def score(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], rubrics: Sequence[Rubric], *,
              seed: int) -> list[GroupScores]:
        if not len(prompts) == len(responses) == len(rubrics):
            raise ValueError(f"prompts, responses and rubrics must be as many (groups), got {len(prompts)}, "
                             f"{len(responses)}, {len(rubrics)}")
        out = [GroupScores(np.zeros((len(rs), len(rub)), np.int32), np.zeros((len(rs), len(rub)), bool),
                           np.asarray(rub.max_points, np.int32)) for rs, rub in zip(responses, rubrics)]
        jobs = [(b, a) for b, rs in enumerate(responses) for a in range(len(rs))]
        reqs = [self._request(prompts[b], responses[b][a], rubrics[b].criteria, seed=request_seed(seed, b, a, 0),
                              temperature=self.temperature) for b, a in jobs]
        outs = self._chat(reqs, "rare judge")
        failed = self._report_failures(outs, "judge")
        if jobs and failed == len(jobs):
            first = next(o for o in outs if isinstance(o, ChatError))
            raise RemoteJudgeUnavailable(
                f"remote judge {self.model_id}: all {len(jobs)} requests of this scoring call failed, so the "
                f"endpoint looks down; stopping rather than scoring every cell 0. First error: "
                f"{self._redact(str(first))[:500]}")
        shown_bad = False
        for (b, a), o in zip(jobs, outs):
            if isinstance(o, ChatError):
                continue
            read = read_answer(o.text, rubrics[b].criteria)
            for j, (s, why) in enumerate(read):
                if s is not None:
                    out[b].scores[a, j], out[b].valid[a, j] = s, True
                elif not shown_bad:  # one example per call is enough to see what the judge does wrong
                    shown_bad = True
                    log.debug("remote judge: unreadable cell (group %d, response %d, %s: %s) in answer %r", b, a,
                              rubrics[b].criteria[j].id, why, self._redact(o.text)[:400])
        if self.retry:
            self._retry(prompts, responses, rubrics, out, seed)
        return out

    def _retry(self, prompts, responses, rubrics, out: list[GroupScores], seed: int) -> None:
        jobs = [(b, a, np.flatnonzero(~gs.valid[a])) for b, gs in enumerate(out) for a in range(gs.valid.shape[0])]
        jobs = [j for j in jobs if j[2].size]
        if not jobs:
            return
        temperature = max(self.temperature, RETRY_MIN_TEMPERATURE)
        reqs = []
        for b, a, cols in jobs:
            s = request_seed(seed, b, a, 1)
            if s == request_seed(seed, b, a, 0):  # keep the retry a new attempt even on a hash collision
                s = (s + 1) & 0x7FFFFFFF
            reqs.append(self._request(prompts[b], responses[b][a], [rubrics[b].criteria[c] for c in cols], seed=s,
                                      temperature=temperature))
        outs = self._chat(reqs, "rare judge retry")
        self._report_failures(outs, "retry")
        for (b, a, cols), o in zip(jobs, outs):
            gs = out[b]
            gs.retried += int(cols.size)
            if isinstance(o, ChatError):
                continue
            for c, s in zip(cols, parse_scores(o.text, [rubrics[b].criteria[c] for c in cols])):
                if s is not None:
                    gs.scores[a, c], gs.valid[a, c] = s, True
                    gs.recovered += 1


__all__ = ["RemoteJudgeUnavailable", "RemoteScorer", "build_messages", "parse_scores", "read_answer",
           "request_seed"]
