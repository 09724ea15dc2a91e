"""The verdict readout every judging path shares: label logits -> label probabilities, and whether the labels
held enough of the model's probability to be read at all; and, for verdicts that come back as text (generate
mode, a remote judge), the one way each kind is read from the text or the served top log-probabilities.

A verdict is read at one position as the logits of its label tokens (the two pair labels, the digits of a score,
the letters of a list, the two verify labels) and the log-sum-exp over the whole vocabulary at that position
(`lse`). With l the label logits,

    p_i      = exp(l_i) / sum_j exp(l_j)                 (the softmax over the labels only)
    log m    = log sum_j exp(l_j) - lse                   (the labels' mass under the full softmax)

and a verdict whose labels hold less than `min_verdict_mass` (m < min_mass) is unreadable: the model was about to
write something else, so the labels' relative odds say little. docs/method.md section 2 gives the readings built
on p (logit, sign, hard) and what each path does with an unreadable verdict.
"""

from __future__ import annotations

import math
import re

import numpy as np


def label_probs(logits, lse, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """(p, log m): the softmax of `logits` over `axis` and the log of the labels' mass against `lse` (whose shape
    is `logits`' without `axis`), in float64, the maximum subtracted first."""
    lg = np.asarray(logits, np.float64)
    mx = np.max(lg, axis=axis, keepdims=True)
    e = np.exp(lg - mx)
    total = e.sum(axis)
    return e / np.expand_dims(total, axis), np.log(total) + np.squeeze(mx, axis) - lse


def enough_mass(log_mass, min_mass: float):
    """Whether each verdict's labels hold at least `min_mass` of the probability (all True when min_mass <= 0)."""
    if min_mass > 0:
        return np.asarray(log_mass) >= math.log(min_mass)
    return np.ones(np.shape(log_mass), bool)


def read_pair_text(text: str, labels: tuple[str, str] = ("A", "B")) -> int:
    """A pairwise verdict written as text: 0 if it names the first label, 1 the second, -1 if none can be read.
    The last written answer wins ("Answer: B", "**Verdict:** Response A", "better response - A": a reply that
    reasons first and answers last); without one, a label that opens the reply ("A", " B.", "**A**",
    "Response B"), the label itself in its own case so that an opening article ("a ...") is not read as one."""
    alt = "|".join(re.escape(lab) for lab in labels)
    hits = re.findall(rf"(?:answer|verdict|better response)\s*[:=\-]?\s*\**\s*(?:response\s*)?({alt})(?![\w])",
                      text, flags=re.IGNORECASE)
    if not hits:
        m = re.match(rf"^[\W_]*(?:[Rr]esponse\s+)?({alt})(?![\w])", text.strip())
        hits = [m.group(1)] if m else []
    if not hits:
        return -1
    last = hits[-1].lower()
    return next((k for k, lab in enumerate(labels) if last == lab.lower()), -1)


def read_score_text(text: str, max_points: int) -> int:
    """A score written as text: the last "Score: N" (or a reply that is only a number) if 0 <= N <= max_points,
    else -1."""
    hits = re.findall(r"score\s*[:=]?\s*\**\s*(\d+)", text, flags=re.IGNORECASE)
    if not hits:
        stripped = text.strip().strip("*").strip()
        hits = [stripped] if stripped.isdigit() else []
    if not hits:
        return -1
    s = int(hits[-1])
    return s if 0 <= s <= max_points else -1


def read_pair_top_logprobs(top_logprobs, labels: tuple[str, str] = ("A", "B"), positions: int = 3) -> float | None:
    """P(first label) from a served completion's top log-probabilities: at the first of its first `positions`
    tokens where a label appears (it may follow a space or markup token), the two labels' probabilities
    renormalised (`label_probs` over their log-probabilities, each label's spellings pooled); None if no label
    appears there."""
    for pos in (top_logprobs or [])[:positions]:
        lab = np.full(2, -np.inf)
        for tok, lp in (pos or {}).items():
            t = tok.strip().strip("*\"'().:").upper()
            for k, name in enumerate(labels):
                if t == name.upper():
                    lab[k] = np.logaddexp(lab[k], lp)
        if np.isfinite(lab).any():
            return float(label_probs(lab, 0.0)[0][0])
    return None
