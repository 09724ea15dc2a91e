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

Text readouts, one per kind: `read_pair_text` (a written A/B verdict), `read_pair_top_logprobs` (a served
completion's label probabilities), `read_score_text` (one criterion's "Score: N") and `read_scores_text` (every
criterion of a rubric in one reply, `<criterion id>: <score>` per line). The local engine's generate mode and
the remote judge (`rubric_jax.judge.remote`) read through these and nothing else.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

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


def allowed_scores_text(c) -> str:
    """A criterion's allowed scores in words ("0, 1 or 2"; "0 or 4 only" when binary)."""
    if c.scoring == "binary":
        return f"0 or {c.max_points} only"
    scores = [str(s) for s in c.scores]
    return ", ".join(scores[:-1]) + f" or {scores[-1]}"


# ---- several criteria's scores in one written answer (a remote judge's pointwise reply)

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


def read_scores_lines(text: str, criteria: Sequence) -> list[tuple[int | None, str]]:
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


def read_scores_text(text: str, criteria: Sequence) -> list[int | None]:
    """Each criterion's score from an answer, None where unreadable.

    A score line is `<id>: <n>` (or `=`), matched case-insensitively; backticks and asterisks anywhere, a
    leading bullet or number, quotes/brackets around the id, the criterion's name after it ("id (Name): 3"),
    "Score: 3" and a trailing "/ m" or "out of m" are tolerated. Lines that are not score lines are ignored;
    so is an id's line whose value does not start with a number (a reason). A cell is unreadable when its id
    has no score line, a score line holds no single integer ("3.5", "2-3"), two lines give different scores,
    or the score is not allowed (binary criteria: 0 or m only).
    """
    return [s for s, _ in read_scores_lines(text, criteria)]
