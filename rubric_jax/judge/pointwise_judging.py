"""Pointwise verdicts through the judge engine: each response scored alone on each criterion's own scale.

Used by absolute rewards (Absolute RaR / Absolute RcRL, RcRL paper Table 3), RARE's integer rubric scores and
the evals scorers. Sequences go through `Judge._score`, the same compiled prefix-tree forward as the pairwise
and listwise verdicts and the constraint verifier:

    sequence(a, c) = head(a) + suffix(c)
    head(a)    [system, "Task", prompt, "Response", response a, the question, "Criterion" heading]
    suffix(c)  [criterion c with its score levels, a reminder of the scale, end of user turn, "Score: "]

Every criterion of response a is a lane under head(a), so a response is read once however many criteria
score it. In logit mode the score is the expectation over the criterion's own scores (0 or m for a binary
criterion, 0..m otherwise) of the softmax over those digit tokens only; hard mode takes the argmax; generate
mode parses the written "Score: N" line. A verdict whose allowed digit tokens hold less than
`min_verdict_mass` of the probability is unreadable: score 0, valid False.

Scales past 9 (0..10, 0..20) in logit and hard modes, for tokenizers that write numbers digit by digit
(prompts.check_digit_by_digit): a criterion gets one more lane per possible leading digit d of a two-digit
score, suffix(c) + [d], whose next-token distribution says how the number goes on (two_digit_probs). Such a
criterion's suffix but its last token is the body of a unit of its own under head(a), so its lanes cost
one or two tokens each, not another read of the criterion or the response.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import jax
import numpy as np

from rubric_jax.judge.cache import JudgmentCache, criterion_digest
from rubric_jax.judge.common import PointwiseResult
from rubric_jax.judge.prompts import SuffixTable, check_digit_by_digit, digit_token_ids
from rubric_jax.judge.readout import enough_mass, label_probs
from rubric_jax.rewards import judge_health as health
from rubric_jax.rewards.compiled import criteria_width, pad_criteria

__all__ = ["pointwise_batch", "two_digit_probs"]

ONE_DIGIT = 9  # the largest score written as one token


def leading_digits(max_points: int) -> range:
    """The digits d that start a two-digit score of 10..max_points: each is one more lane to read (empty for a
    one-digit scale)."""
    return range(1, min(max_points // 10, ONE_DIGIT) + 1)


def two_digit_probs(first: np.ndarray, then: dict[int, np.ndarray], allowed) -> tuple[np.ndarray, float]:
    """P(score = s) for s in `allowed` (a scale up to 99) from two next-token readings, and log of the mass.

    `first`: logits of the digit tokens "0".."9" where the score starts, then the log-sum-exp over the whole
    vocabulary; `then[d]`: the same after the judge has written the digit d, for each d that can start a
    two-digit allowed score. With P0(d) = exp(first[d] - lse), P_d(e) = exp(then[d][e] - lse_d) and
    P_d(end) = 1 - sum_e P_d(e) (anything but a digit ends the number):

        q(s) = P0(s) * P_d=s(end)       s < 10 and s starts a two-digit score,
        q(s) = P0(s)                    s < 10 otherwise (a digit after it would leave the scale),
        q(s) = P0(s // 10) * P_{s // 10}(s % 10)      s >= 10,
        P(s) = q(s) / sum_{s' allowed} q(s'),     mass = sum_{s' allowed} q(s')   (log returned).

    The result is NaN (an unreadable verdict) when no allowed score has any probability."""
    allowed = [int(s) for s in allowed]
    p0 = np.exp(np.asarray(first[:10], np.float64) - float(first[-1]))
    pn = {d: np.exp(np.asarray(v[:10], np.float64) - float(v[-1])) for d, v in then.items()}
    q = np.empty(len(allowed))
    for k, s in enumerate(allowed):
        if s < 10:
            q[k] = p0[s] * (max(0.0, 1.0 - pn[s].sum()) if s in pn else 1.0)
        else:
            q[k] = p0[s // 10] * pn[s // 10][s % 10]
    total = q.sum()
    with np.errstate(all="ignore"):
        return q / total, (math.log(total) if total > 0 else -math.inf)


def pointwise_batch(judge, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                    mode: str | None = None, sharing: str | None = None, seed: int = 0) -> list[PointwiseResult]:
    """Scores several prompts' groups together. No call-level randomness: logit/hard modes are
    deterministic and generate mode keys each judged sequence by its tokens and `seed` (see
    `_run_generate`; another seed is another sample, e.g. to retry an unreadable answer)."""
    t0 = time.perf_counter()
    mode = judge.resolve_mode(mode)
    sharing = sharing or judge.config.sharing
    per_prompt = judge.criteria_per_prompt(criteria, len(prompts))
    gen = mode == "generate"
    m_all = max(cr.max_points for crits in per_prompt for cr in crits)
    # generate mode parses the written score; logit and hard read scales past 9 digit by digit
    ids = [] if gen else digit_token_ids(judge.tokenizer, min(m_all, ONE_DIGIT))
    if not gen and m_all > ONE_DIGIT:
        check_digit_by_digit(judge.tokenizer, ids, m_all)
    suffix_of = SuffixTable(judge.prompts, "point", gen)
    mode_class = "gen:" + repr((judge.config.gen_max_new_tokens, judge.config.gen_temperature,
                                judge.config.gen_top_k, seed)) if gen else "logit"
    work, where, groups = [], [], []
    for prompt, resps, crits in zip(prompts, responses, per_prompt):
        p_ids, r_ids, d_p, d_r = judge.encode_group(prompt, resps)
        gr = dict(g=len(resps), crits=crits)
        groups.append(gr)
        for a in range(len(resps)):
            head = judge.prompts.head("point", p_ids, r_ids[a], gen)
            for c, cr in enumerate(crits):
                key = JudgmentCache.key(judge.model_id, judge.prompts.fingerprint, "point", mode_class, d_p, d_r[a],
                                        "", criterion_digest(cr))
                where.append((gr, a, c, key))
                if gen or cr.max_points <= ONE_DIGIT:
                    work.append((key, head, (), suffix_of.add(cr)))
                    continue
                # a two-digit scale: the criterion's text is the body of its own unit, read once, and its
                # lanes are the suffix's last token alone and followed by each leading digit of 10..max
                body = suffix_of.body(cr)
                work.append((key, head, body, suffix_of.add(cr, split=True)))
                for d in leading_digits(cr.max_points):
                    work.append((key + f"|then{d}", head, body, suffix_of.add(cr, (ids[d],), split=True)))
    got = judge._score("point", mode, work, suffix_of, ids, sharing, seed=seed)
    for gr in groups:
        gr["raw"], gr["then"] = {}, {}
    for gr, a, c, key in where:
        gr["raw"][a, c] = got[key]
        gr["then"][a, c] = {} if gen else {d: got[key + f"|then{d}"] for d in leading_digits(gr["crits"][c].max_points)}
    results = [_point_result(judge, gr, mode, m_all) for gr in groups]
    judge.stats.seconds += time.perf_counter() - t0
    return results


def _point_result(judge, gr, mode, m_all) -> PointwiseResult:
    """One group's scores from its raw verdicts {(response, criterion): digit logits + lse, or [parsed score]}."""
    g, crits = gr["g"], gr["crits"]
    c_n = len(crits)
    mc = np.asarray([cr.max_points for cr in crits], np.int32)
    scores = np.zeros((g, c_n), np.float32)
    valid = np.zeros((g, c_n), bool)
    probs = np.full((g, c_n, m_all + 1), np.nan if mode == "generate" else 0.0, np.float32)
    for (a, c), v in gr["raw"].items():
        if mode == "generate":
            s = int(v[0])
            valid[a, c] = s >= 0
            scores[a, c] = max(s, 0)
            continue
        # Only the criterion's own scores compete (0 or m for a binary criterion, 0..m otherwise).
        allowed = np.asarray(crits[c].scores)
        if crits[c].max_points > ONE_DIGIT:
            pr, mass = two_digit_probs(v, gr["then"][a, c], allowed)
        else:
            pr, mass = label_probs(v[allowed], float(v[-1]))
        probs[a, c, allowed] = pr
        valid[a, c] = bool(np.all(np.isfinite(pr))) and bool(enough_mass(mass, judge.config.min_verdict_mass))
        scores[a, c] = float(allowed[np.argmax(pr)]) if mode == "hard" else float(np.dot(pr, allowed))
    scores = np.where(valid, scores, 0.0).astype(np.float32)
    judge.stats.invalid += int((~valid).sum())
    width = criteria_width(c_n)
    ent, invalid = _point_health(np.pad(np.nan_to_num(probs), [(0, 0), (0, width - c_n), (0, 0)]),
                                 pad_criteria(valid, width, False), pad_criteria(np.ones_like(valid), width, False))
    metrics = {"judgments": float(g * c_n), "invalid_fraction": float(invalid),
               "verdict_entropy": 0.0 if mode == "generate" else float(ent),
               "saturation": float(health.saturation(scores, valid, mc))}
    return PointwiseResult(scores=scores, valid=valid, probs=probs, max_points=mc, metrics=metrics)


@jax.jit
def _point_health(probs, valid, counted):
    """Verdict entropy and invalid fraction of one group as one program per (G, padded C, scale): padded
    criteria are not counted."""
    return health.verdict_entropy(probs, valid), health.invalid_fraction(valid, counted)
