"""The verdict readout every judging path shares: label logits -> label probabilities, and whether the labels
held enough of the model's probability to be read at all.

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
