"""The remote judge: the `Verdicts` protocol served by any chat model behind an OpenAI-compatible endpoint.

`Judge` (engine.py) reads our own frozen model through the compiled forward; `RemoteJudge` asks a chat server
(OpenAI itself, vLLM, llama.cpp, `python -m rubric_jax.serve`) through the project's one client
(`rubric_jax.openai_client.ChatClient`) and returns the same result types, read with the same text readouts as
the local engine's generate mode (`rubric_jax.judge.readout`).

    judge = RemoteJudge.from_spec("openai:MODEL@BASE_URL")       # key from OPENAI_API_KEY
    judge.pairwise_batch(prompts, groups, criteria)               # PairwiseResult per group
    judge.pointwise_batch(prompts, groups, criteria, seed=0)      # PointwiseResult per group (integer scores)
    judge.verify_batch(prompts, groups, constraints)              # VerifyResult per group

Pairwise: one request per ordered pair (a shown as "A", b as "B") and criterion, asking for the letter alone;
P(A) is read from the first answer token's top log-probabilities where the server gives them
(`read_pair_top_logprobs`), else from the text (`read_pair_text`); unreadable -> the other order's verdict, both
unreadable -> 1/2, exactly as the local readout fills orders (`pair_readout.pair_result`, which turns these
probabilities into the mode's preferences and win rates). Pairings "all" and "circular"; Swiss pairing and
listwise comparison need the local engine (they plan their sequences from the judge's own tokens).

Pointwise: one request per response holding all of its rubric's criteria (a judge reads the rubric as a
whole, and a long response is sent once, not C times), answered `<criterion id>: <score>` per line and read by
`read_scores_text`:

    s_ij in allowed(j)   allowed(j) = {0, 1, .., m_j}, or {0, m_j} for a binary criterion
    valid_ij             whether the judge's answer could be read

A cell is unreadable when its line is missing, its number is not an allowed score or the answer gives two
different scores; a request that fails outright (`ChatError` after the client's own retries) leaves all its
cells unreadable. With `retry`, each response with unreadable cells gets one more request holding only those
criteria, with its own seed and temperature max(temperature, 0.7) so that a greedy server does not write the
same answer again. Still unreadable: valid_ij = False, s_ij = 0. When every request of a call fails the
endpoint is down: `RemoteJudgeUnavailable`, so that training stops rather than learning from zeros.

Verify: each constraint is a binary criterion ("keeps it" / "breaks it") of the pointwise request, so a
response is sent once for all its constraints; p_pass is 1 or 0, 1/2 where unreadable.

Pointwise failures are logged at most twice per batch; everything logged or raised goes through the client's `redact`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Sequence

import numpy as np

from rubric_jax.judge.common import COMPARISONS, PairwiseResult, PointwiseResult, as_criteria, criteria_per_prompt
from rubric_jax.judge.pair_readout import pair_result, pooled_vals
from rubric_jax.judge.pairings import pairs_for
from rubric_jax.judge.readout import (allowed_scores_text, read_pair_text, read_pair_top_logprobs,
                                      read_scores_lines, read_scores_text)
from rubric_jax.judge.verify import VerifyResult
from rubric_jax.openai_client import ChatClient, ChatError, Completion, redact, run_sync
from rubric_jax.rubrics.types import Criterion

log = logging.getLogger(__name__)

RETRY_MIN_TEMPERATURE = 0.7
EMPTY_RESPONSE = "(the response is empty)"

# ---- prompts -----------------------------------------------------------------------------------------------

PAIR_SYSTEM = "You are an impartial judge of writing. You compare two responses to a task and say which is better."
PAIR_USER = ("### Task\n{prompt}\n\n### Response A\n{a}\n\n### Response B\n{b}\n\n### Criterion\n{name}: {check}\n\n"
             "Which response better satisfies the criterion? Reply with the single letter A or B only.")

SCORE_SYSTEM = ("You are a careful grader. You grade one response to a task against a list of criteria. Judge every "
                "criterion on its own, independently of the others, and give each one integer score chosen from "
                "that criterion's allowed scores.")
SCORE_USER = ("### Task\n{prompt}\n\n### Response\n{response}\n\n### Criteria\n{criteria}\n\n### How to answer\n"
              "Grade the response on each criterion above independently. Reply with exactly one line per "
              "criterion, in the order listed, of the form `<criterion id>: <score>`, where the score is one of "
              "that criterion's allowed scores, and write nothing else:\n{template}")


class RemoteJudgeUnavailable(RuntimeError):
    """Every request of a call failed: the judge endpoint is down or refuses us."""


def criterion_block(c: Criterion) -> str:
    levels = "\n".join(f"- {s}: {c.level_text(s)}" for s in c.scores)
    return (f"Criterion id: {c.id}\nName: {c.name}\nCheck: {c.check}\nAllowed scores: {allowed_scores_text(c)}\n"
            f"Levels:\n{levels}")


def cut_text(text: str, max_chars: int) -> str:
    """`text` cut to max_chars characters, with a marker saying how much the judge does not see."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... response cut here: {len(text) - max_chars} more characters not shown ...]"


def score_messages(prompt: str, response: str, criteria: Sequence[Criterion], *,
                   max_response_chars: int = 24000) -> list[dict]:
    """The chat messages of one pointwise request: the task, one response and the criteria to grade it on."""
    shown = cut_text(response, max_response_chars) if response.strip() else EMPTY_RESPONSE
    user = SCORE_USER.format(prompt=prompt, response=shown,
                             criteria="\n\n".join(criterion_block(c) for c in criteria),
                             template="\n".join(f"{c.id}: <score>" for c in criteria))
    return [{"role": "system", "content": SCORE_SYSTEM}, {"role": "user", "content": user}]


def pair_messages(prompt: str, a: str, b: str, c: Criterion, *, max_chars: int = 6000) -> list[dict]:
    """The chat messages of one pairwise request: `a` shown first ("A"), `b` second."""
    cut = lambda s: s[:max_chars]
    user = PAIR_USER.format(prompt=cut(prompt), a=cut(a), b=cut(b), name=c.name, check=c.check)
    return [{"role": "system", "content": PAIR_SYSTEM}, {"role": "user", "content": user}]


def constraint_criteria(texts: Sequence[str]) -> list[Criterion]:
    """A prompt's constraint sentences as binary criteria on 0/1 (1: the response keeps it)."""
    return [Criterion(id=f"constraint_{k + 1}", name=f"Constraint {k + 1}", check=str(t),
                      levels=("the response breaks this constraint", "the response keeps this constraint"),
                      max_points=1, scoring="binary") for k, t in enumerate(texts)]


def request_seed(seed: int, group: int, response: int, attempt: int) -> int:
    """A reproducible per-request seed (31 bits, as servers expect), different for each attempt."""
    words = [int(seed) & 0xFFFFFFFFFFFFFFFF, group, response, attempt]
    return int(np.random.SeedSequence(words).generate_state(1)[0] & 0x7FFFFFFF)


def p_from_completion(text: str, top_logprobs) -> float | None:
    """P(A) of a pairwise reply: from the first answer token's top log-probabilities (A/B mass renormalised),
    else from the text; None when neither can be read."""
    p = read_pair_top_logprobs(top_logprobs)
    if p is not None:
        return p
    k = read_pair_text(text or "")
    return None if k < 0 else 1.0 - k


# ---- the judge ---------------------------------------------------------------------------------------------

class RemoteJudge:
    """Verdicts from a chat model behind an OpenAI-compatible endpoint (module docstring).

    client: a `ChatClient` (its concurrency, retries, timeout and cache apply to every request).
    max_response_chars: each response is cut to this many characters in a pointwise request, with a marker.
    max_new_tokens, temperature: of the first pointwise request per response (the retry samples at >= 0.7).
    retry: one more pointwise request per response with unreadable cells, holding only those criteria.
    pair_max_chars: the task and each response are cut to this many characters in a pairwise request.
    """

    def __init__(self, client: ChatClient, *, max_response_chars: int = 24000, max_new_tokens: int = 256,
                 temperature: float = 0.0, retry: bool = True, model_id: str | None = None,
                 pair_max_chars: int = 6000):
        if max_response_chars < 1 or max_new_tokens < 1 or pair_max_chars < 1:
            raise ValueError(f"max_response_chars, max_new_tokens and pair_max_chars must be >= 1, got "
                             f"{max_response_chars}, {max_new_tokens}, {pair_max_chars}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.client = client
        self.max_response_chars = int(max_response_chars)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.retry = bool(retry)
        self.pair_max_chars = int(pair_max_chars)
        self.model_id = model_id or f"openai:{client.model}@{client.base_url}"

    @classmethod
    def from_spec(cls, spec: str, *, timeout_s: float = 120.0, concurrency: int = 8, max_retries: int = 5,
                  backoff_s: float = 1.0, cache_dir: str | None = None, **kw) -> "RemoteJudge":
        """"openai:MODEL@BASE_URL" (key from OPENAI_API_KEY); `kw` goes to the constructor."""
        client = ChatClient.from_spec(spec, timeout_s=timeout_s, concurrency=concurrency, max_retries=max_retries,
                                      backoff_s=backoff_s, cache_dir=cache_dir)
        return cls(client, model_id=spec, **kw)

    def __repr__(self) -> str:
        return f"RemoteJudge({self.model_id!r}, temperature={self.temperature}, retry={self.retry})"

    # ---- requests ------------------------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        # the shared redaction, with the key of whichever variable this client reads (a test's stand-in
        # client may not be a ChatClient, hence the default)
        return redact(text, [os.environ.get(getattr(self.client, "api_key_env", "OPENAI_API_KEY"))])

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
            log.warning("remote judge %s: %d of %d %s requests failed; their verdicts are unreadable. First "
                        "error: %s", self.model_id, len(errors), len(outs), what, self._redact(str(errors[0]))[:300])
        return len(errors)

    def _all_failed(self, outs: list) -> None:
        if outs and all(isinstance(o, ChatError) for o in outs):
            first = outs[0]
            raise RemoteJudgeUnavailable(
                f"remote judge {self.model_id}: all {len(outs)} requests of this call failed, so the endpoint "
                f"looks down; stopping rather than reading every verdict as unreadable. First error: "
                f"{self._redact(str(first))[:500]}")

    # ---- pairwise ------------------------------------------------------------------------------------------
    def ordered_pairs(self, prompt: str, answers: Sequence[str], pairs: Sequence[tuple[int, int]],
                      criteria: Sequence[Criterion]) -> np.ndarray:
        """(len(pairs), C) P(answer i wins | i shown first, j second) per ordered pair (i, j) and criterion,
        NaN where the reply could not be read. One request each, all of them in one concurrent batch; a request
        the client gives up on raises its `ChatError` (a pair verdict has no partial answer to keep, and an
        evaluation must not cache a guess for it)."""
        criteria = as_criteria(criteria)
        reqs = [dict(messages=pair_messages(prompt, answers[i], answers[j], c, max_chars=self.pair_max_chars),
                     max_tokens=4, temperature=0.0, top_logprobs=20)
                for i, j in pairs for c in criteria]
        outs = self.client.chat_many(reqs, desc="judge") if reqs else []
        vals = [p_from_completion(o.text, o.top_logprobs) for o in outs]
        return np.asarray([np.nan if v is None else v for v in vals], np.float64).reshape(len(pairs), len(criteria))

    def pairwise_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                       mode: str | None = None, pairing: str | None = None, seed: int = 0,
                       group_ids: Sequence[int] | None = None, comparison: str | None = None,
                       sharing: str | None = None) -> list[PairwiseResult]:
        """`Verdicts.pairwise_batch`. mode: "logit" (default), "sign" or "hard"; pairing "all" (default) or
        "circular"; seed and group_ids are unused (no random pairing here)."""
        del seed, group_ids, sharing
        mode = mode or "logit"
        if mode not in ("logit", "sign", "hard"):
            raise ValueError(f"a remote judge reads pairwise verdicts in mode 'logit', 'sign' or 'hard', got {mode!r}")
        comparison = comparison or "pairwise"
        if comparison not in COMPARISONS:
            raise ValueError(f"comparison: unknown {comparison!r}; expected one of {COMPARISONS}")
        if comparison != "pairwise":
            raise ValueError("comparison='listwise' needs the local judge (rubric_jax.judge.Judge): a listwise "
                             "sequence is planned from the judge model's own tokens")
        pairing = pairing or "all"
        if pairing not in ("all", "circular"):
            raise ValueError(f"a remote judge pairs 'all' or 'circular', got {pairing!r} (Swiss rounds need the "
                             f"local judge)")
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} response groups")
        per_prompt = criteria_per_prompt(criteria, len(prompts))
        results = []
        for prompt, resps, crits in zip(prompts, responses, per_prompt):
            g, c = len(resps), len(crits)
            mask = np.zeros((g, g), bool)
            ordered = []
            for i, j in np.asarray(pairs_for(pairing, g), np.int64).reshape(-1, 2):
                mask[i, j] = mask[j, i] = True
                ordered += [(int(i), int(j)), (int(j), int(i))]
            pf = self.ordered_pairs(prompt, resps, ordered, crits) if ordered else np.zeros((0, c))
            vals = np.full((g, g, c, 3), np.nan, np.float32)
            for (a, b), p in zip(ordered, pf):
                # P(first) as label logits whose softmax it is, all mass on the labels (a text-only verdict of
                # 1 or 0 is clipped to a logit of -+13.8); NaN (unreadable) stays NaN
                q = np.clip(np.nan_to_num(p, nan=0.5), 1e-6, 1 - 1e-6)
                vals[a, b] = np.where(np.isnan(p)[:, None], np.nan, pooled_vals(np.log(q) - np.log1p(-q)))
            results.append(pair_result(dict(g=g, c=c, vals=vals, mask=mask), mode, 0.0))
        return results

    def pairwise(self, prompt: str, responses: Sequence[str], criteria, **kw) -> PairwiseResult:
        """One group of `pairwise_batch`."""
        return self.pairwise_batch([prompt], [responses], criteria, **kw)[0]

    # ---- pointwise -----------------------------------------------------------------------------------------
    def _score_request(self, prompt: str, response: str, criteria: Sequence[Criterion], *, seed: int,
                       temperature: float) -> dict:
        return {"messages": score_messages(prompt, response, criteria, max_response_chars=self.max_response_chars),
                "max_tokens": self.max_new_tokens, "temperature": temperature, "seed": seed}

    def pointwise_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                        mode: str | None = None, seed: int = 0, sharing: str | None = None) -> list[PointwiseResult]:
        """`Verdicts.pointwise_batch`: integer scores read from text (mode None or "generate", the only reading
        a reply allows). criteria: one rubric for all prompts or one per prompt. metrics: "retried" cells
        asked again and of them "recovered", and "failed_requests"."""
        del sharing
        if mode not in (None, "generate"):
            raise ValueError(f"a remote judge reads written scores (mode 'generate'), got mode {mode!r}")
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} response groups")
        crits = criteria_per_prompt(criteria, len(prompts))
        t0 = time.perf_counter()
        scores = [np.zeros((len(rs), len(cs)), np.int64) for rs, cs in zip(responses, crits)]
        valid = [np.zeros((len(rs), len(cs)), bool) for rs, cs in zip(responses, crits)]
        jobs = [(b, a) for b, rs in enumerate(responses) for a in range(len(rs))]
        reqs = [self._score_request(prompts[b], responses[b][a], crits[b], seed=request_seed(seed, b, a, 0),
                                    temperature=self.temperature) for b, a in jobs]
        outs = self._chat(reqs, "judge scores")
        failed = [self._report_failures(outs, "judge")]
        self._all_failed(outs)
        shown_bad = False
        for (b, a), o in zip(jobs, outs):
            if isinstance(o, ChatError):
                continue
            for j, (s, why) in enumerate(read_scores_lines(o.text, crits[b])):
                if s is not None:
                    scores[b][a, j], valid[b][a, j] = s, True
                elif not shown_bad:  # one example per call is enough to see what the judge does wrong
                    shown_bad = True
                    log.debug("remote judge: unreadable cell (group %d, response %d, %s: %s) in answer %r", b, a,
                              crits[b][j].id, why, self._redact(o.text)[:400])
        retried = [0] * len(prompts)
        recovered = [0] * len(prompts)
        if self.retry:
            self._retry(prompts, responses, crits, scores, valid, retried, recovered, failed, seed)
        seconds = time.perf_counter() - t0
        out = []
        for b, cs in enumerate(crits):
            m = max((c.max_points for c in cs), default=0)
            out.append(PointwiseResult(
                scores=scores[b].astype(np.float32), valid=valid[b],
                probs=np.full(valid[b].shape + (m + 1,), np.nan, np.float32),
                max_points=np.asarray([c.max_points for c in cs], np.int32),
                metrics={"retried": float(retried[b]), "recovered": float(recovered[b]),
                         "failed_requests": float(sum(failed)), "invalid_fraction":
                         float((~valid[b]).mean()) if valid[b].size else 0.0, "seconds": seconds}))
        return out

    def _retry(self, prompts, responses, crits, scores, valid, retried, recovered, failed, seed: int) -> None:
        jobs = [(b, a, np.flatnonzero(~v[a])) for b, v in enumerate(valid) for a in range(v.shape[0])]
        jobs = [j for j in jobs if j[2].size]
        if not jobs:
            return
        temperature = max(self.temperature, RETRY_MIN_TEMPERATURE)
        reqs = []
        for b, a, cols in jobs:
            s = request_seed(seed, b, a, 1)
            if s == request_seed(seed, b, a, 0):  # keep the retry a new attempt even on a hash collision
                s = (s + 1) & 0x7FFFFFFF
            reqs.append(self._score_request(prompts[b], responses[b][a], [crits[b][c] for c in cols], seed=s,
                                            temperature=temperature))
        outs = self._chat(reqs, "judge scores retry")
        failed.append(self._report_failures(outs, "retry"))
        for (b, a, cols), o in zip(jobs, outs):
            retried[b] += int(cols.size)
            if isinstance(o, ChatError):
                continue
            for c, s in zip(cols, read_scores_text(o.text, [crits[b][c] for c in cols])):
                if s is not None:
                    scores[b][a, c], valid[b][a, c] = s, True
                    recovered[b] += 1

    def pointwise(self, prompt: str, responses: Sequence[str], criteria, **kw) -> PointwiseResult:
        """One group of `pointwise_batch`."""
        return self.pointwise_batch([prompt], [responses], criteria, **kw)[0]

    # ---- verify --------------------------------------------------------------------------------------------
    def verify_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]],
                     constraints: Sequence[Sequence[str]], *, mode: str | None = None,
                     sharing: str | None = None) -> list[VerifyResult]:
        """`Verdicts.verify_batch`: each prompt's constraint sentences as binary criteria of one pointwise
        request per response; p_pass 1 (keeps it) or 0, 1/2 where unreadable (a verifier that cannot tell does
        not penalise)."""
        del mode, sharing
        if not len(prompts) == len(responses) == len(constraints):
            raise ValueError(f"{len(prompts)} prompts, {len(responses)} response groups, {len(constraints)} "
                             f"constraint lists: one of each per prompt")
        out: list[VerifyResult | None] = [None] * len(prompts)
        todo = [q for q, texts in enumerate(constraints) if len(texts)]
        for q, texts in enumerate(constraints):
            if any(not str(t).strip() for t in texts):
                raise ValueError(f"prompt {q}: an empty constraint sentence")
            if not len(texts):
                g = len(responses[q])
                out[q] = _verify_result(np.zeros((g, 0)), np.zeros((g, 0), bool))
        if todo:
            res = self.pointwise_batch([prompts[q] for q in todo], [responses[q] for q in todo],
                                       [constraint_criteria(constraints[q]) for q in todo])
            for q, r in zip(todo, res):
                out[q] = _verify_result(r.scores, r.valid)
        return out


def _verify_result(scores: np.ndarray, valid: np.ndarray) -> VerifyResult:
    p = np.where(valid, scores, 0.5).astype(np.float32)
    g, k = p.shape
    metrics = {"judgments": float(g * k), "invalid_fraction": float((~valid).mean()) if valid.size else 0.0,
               "label_bias": 0.0, "order_agreement": 1.0,
               "pass_rate": float((p >= 0.5).mean()) if valid.size else 1.0}
    orders = np.where(valid, p, np.nan).astype(np.float32)
    return VerifyResult(p_pass=p, p_orders=np.stack([orders, orders], -1), valid=valid.copy(), metrics=metrics)


__all__ = ["RemoteJudge", "RemoteJudgeUnavailable"]
