"""The LLM constraint verifier: does each response keep each of its prompt's constraints? (RLMR, docs/method.md)

Source: "RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing" (arXiv 2508.18642) verifies
constraints no program can check with a prompted LLM answering pass/fail. Here the frozen self-judge answers,
through the judge engine's compiled prefix-tree forward (`Judge._score`, the same program as its pairwise and
pointwise verdicts):

    sequence(a, k, o) = head(a) + suffix(k, o)
    head(a)      [system, "Task", prompt, "Response", response a, question, "Constraint" heading]
    suffix(k, o) [constraint k, "answer <pass label> if it keeps it, <fail label> if not", answer cue]

Label order o = 0 makes the first label (" A") mean "keeps it", o = 1 the second (" B"). The verdict of one
order is the softmax over the two label tokens only; the two orders are averaged,

    p_pass(a, k) = 1/2 [ P_0(first label) + P_1(second label) ],

which cancels a judge's preference for one letter whatever the constraint (the same device as the pairwise
judge's two presentation orders). Every constraint and both orders of one response are lanes under one shared
head: a response is read once however many constraints it is checked against. Mode "hard" takes each order's
argmax instead (orders that disagree give 1/2); mode "sign" makes the order-averaged p_pass discrete (1 above
1/2, 0 below). A response passes when p_pass >= 1/2: a verifier that cannot
tell does not penalise. An order whose label tokens hold less than `min_verdict_mass` of the probability is
unreadable and replaced by the other order; both unreadable -> 1/2, counted in `invalid_fraction`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from rubric_jax.judge.cache import JudgmentCache, digest
from rubric_jax.judge.prompts import Suffixes
from rubric_jax.judge.readout import enough_mass, label_probs

__all__ = ["VerifyResult", "verify_batch"]


@dataclasses.dataclass
class VerifyResult:
    """One prompt's group: G responses x K constraints."""

    p_pass: np.ndarray  # (G, K) both label orders averaged
    p_orders: np.ndarray  # (G, K, 2) P(keeps it) read in order 0 and order 1 (nan: unreadable)
    valid: np.ndarray  # (G, K) at least one order readable
    metrics: dict

    @property
    def passes(self) -> np.ndarray:
        return self.p_pass >= 0.5


def verify_batch(judge, prompts: Sequence[str], responses: Sequence[Sequence[str]],
                 constraints: Sequence[Sequence[str]], *, mode: str | None = None,
                 sharing: str | None = None) -> list[VerifyResult]:
    """Pass probabilities of every response of every prompt against that prompt's constraint sentences.

    judge: a `rubric_jax.judge.Judge`; constraints[q]: the sentences of prompt q (may be empty: K = 0).
    mode: "logit", "sign" or "hard" (default: "hard" for a hard-mode judge, else "logit": the verifier reads
    label logits). Verdicts are cached in the judge's judgment cache like its other verdicts.
    """
    t0 = time.perf_counter()
    # A sign-mode judge verifies in logit mode: a response passes when p_pass >= 1/2 in both, and the soft
    # p_pass says how sure the verifier was.
    mode = mode or ("hard" if judge.config.mode == "hard" else "logit")
    if mode not in ("logit", "sign", "hard"):
        raise ValueError(f"the constraint verifier reads the label logits: mode must be 'logit', 'sign' or 'hard', "
                         f"got {mode!r}")
    if not len(prompts) == len(responses) == len(constraints):
        raise ValueError(f"{len(prompts)} prompts, {len(responses)} response groups, {len(constraints)} "
                         f"constraint lists: one of each per prompt")
    sharing = sharing or judge.config.sharing
    pb = judge.prompts
    fp = pb.verify_fingerprint
    table = Suffixes()  # (constraint text, order) -> its suffix
    work, where, groups = [], [], []
    for q, (prompt, resps, texts) in enumerate(zip(prompts, responses, constraints)):
        texts = [str(t) for t in texts]
        if any(not t.strip() for t in texts):
            raise ValueError(f"prompt {q}: an empty constraint sentence")
        p_ids, r_ids, d_p, d_r = judge.encode_group(prompt, resps)
        groups.append(np.full((len(resps), len(texts), 2, 3), np.nan, np.float32))
        for a in range(len(resps)):
            head = pb.head("verify", p_ids, r_ids[a])
            for k, text in enumerate(texts):
                for o in (0, 1):
                    key = JudgmentCache.key(judge.model_id, fp, "verify", mode, d_p, d_r[a], str(o), digest(text))
                    work.append((key, head, (), table.keyed((text, o), lambda: pb.verify_suffix(text, o))))
                    where.append((q, a, k, o, key))
    got = judge._score("verify", mode, work, table, pb.label_ids, sharing) if work else {}
    for q, a, k, o, key in where:
        groups[q][a, k, o] = got[key]
    results = [_result(vals, mode, judge.config.min_verdict_mass) for vals in groups]
    judge.stats.invalid += int(sum((~r.valid).sum() for r in results))
    judge.stats.seconds += time.perf_counter() - t0
    return results


def _result(vals: np.ndarray, mode: str, min_mass: float) -> VerifyResult:
    """vals (G, K, 2 orders, [logit first label, logit second label, log-sum-exp over the vocabulary])."""
    g, k = vals.shape[:2]
    p, log_mass = label_probs(vals[..., :2], vals[..., 2])
    p_first = p[..., 0]  # P(first label) per order
    readable = np.isfinite(p_first) & enough_mass(log_mass, min_mass)
    p_keep = np.stack([p_first[..., 0], 1.0 - p_first[..., 1]], -1)  # the pass label is first in order 0 only
    if mode == "hard":
        p_keep = np.where(p_keep > 0.5, 1.0, np.where(p_keep < 0.5, 0.0, 0.5))
    p_keep = np.where(readable, p_keep, np.nan)
    other = p_keep[..., ::-1]
    filled = np.where(readable, p_keep, np.where(readable[..., ::-1], other, 0.5))
    p_pass = filled.mean(-1)
    if mode == "sign":
        p_pass = np.where(p_pass > 0.5, 1.0, np.where(p_pass < 0.5, 0.0, 0.5))
    p_pass = p_pass.astype(np.float32)
    valid = readable.any(-1)
    both = readable.all(-1)
    n = max(int(both.sum()), 1)
    metrics = {
        "judgments": float(g * k * 2),
        "invalid_fraction": float((~valid).mean()) if valid.size else 0.0,
        # how far the first label is preferred whatever it means (0: no letter bias)
        "label_bias": float(np.where(readable, p_first, 0.5).mean() - 0.5) if valid.size else 0.0,
        "order_agreement": float(((p_keep[..., 0] >= 0.5) == (p_keep[..., 1] >= 0.5))[both].sum() / n),
        "pass_rate": float((p_pass >= 0.5).mean()) if valid.size else 1.0,
    }
    return VerifyResult(p_pass=p_pass, p_orders=p_keep.astype(np.float32), valid=valid, metrics=metrics)
