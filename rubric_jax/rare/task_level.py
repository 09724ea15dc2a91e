"""RARE's task-level revision rules: when to revise a shared rubric, which evidence the writer sees, and when
a revised rubric is accepted.

"RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", section 3
("Task-Level Rubric Evolution") and the appendix on task-level updates (math: docs/method.md §3):
  - a fixed number of revisions (5) evenly spaced over the run;
  - evidence from the last three steps t-2, t-1, t: groups with at least 4 valid rollouts, one per query
    (its latest), and at least 12 distinct queries, else no revision;
  - 12 to 16 groups, evenly spread over the mean-reward ranking when there are more;
  - in each group the representative is the valid rollout whose reward is nearest the group's median;
  - the writer rewrites the shared rubric (count, ids, order and maxima fixed); the judge rescores the same
    representatives; accepted only with valid scores for at least 12 of them, at least two distinct new
    rewards, and |mean new reward - mean old reward| <= 0.35; an accepted rubric applies from the next step.
Everything here is plain numpy over recorded evidence, so each rule is testable at its boundary.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

MIN_VALID_ROLLOUTS = 4
MIN_QUERIES = 12
MAX_GROUPS = 16
MAX_MEAN_SHIFT = 0.35
WINDOW = 3  # steps t-2, t-1, t


@dataclasses.dataclass(frozen=True)
class EvidenceGroup:
    """One scored group kept as evidence for a revision."""

    key: str  # the query's id
    step: int
    query: str
    responses: tuple[str, ...]
    rewards: np.ndarray  # (G,) r_i under the shared rubric of that step
    valid: np.ndarray  # (G,) bool: every criterion of the rollout read
    scores: np.ndarray  # (G, C)
    task: str = ""  # the rubric-store key of the shared rubric it was scored under
    version: int = 1  # that rubric's version when it was scored


def revision_steps(total_steps: int, count: int = 5) -> list[int]:
    """The steps after which a revision is attempted: `count` evenly spaced points strictly inside the run,
    t_k = round(k * total_steps / (count + 1)), k = 1..count (duplicates and steps before the evidence
    window is full dropped)."""
    out = sorted({int(round(k * total_steps / (count + 1))) for k in range(1, count + 1)})
    return [t for t in out if WINDOW - 1 <= t < total_steps - 1]


def eligible_groups(evidence: Sequence[EvidenceGroup], step: int, *, window: int = WINDOW,
                    min_valid: int = MIN_VALID_ROLLOUTS) -> list[EvidenceGroup]:
    """Groups from steps step-window+1..step with at least `min_valid` valid rollouts; per query the latest."""
    latest: dict[str, EvidenceGroup] = {}
    for g in evidence:
        if step - window < g.step <= step and int(np.sum(g.valid)) >= min_valid:
            if g.key not in latest or g.step >= latest[g.key].step:
                latest[g.key] = g
    return list(latest.values())


def select_groups(groups: Sequence[EvidenceGroup], *, min_queries: int = MIN_QUERIES,
                  max_groups: int = MAX_GROUPS) -> list[EvidenceGroup] | None:
    """None when fewer than `min_queries` distinct queries; all of them up to `max_groups`; beyond that,
    `max_groups` groups at evenly spaced ranks of the mean valid reward (lowest and highest included)."""
    if len({g.key for g in groups}) < min_queries:
        return None
    ranked = sorted(groups, key=lambda g: (float(np.mean(g.rewards[g.valid])), g.key))
    if len(ranked) <= max_groups:
        return ranked
    picks = np.unique(np.round(np.linspace(0, len(ranked) - 1, max_groups)).astype(int))
    return [ranked[i] for i in picks]


def representative(group: EvidenceGroup) -> int:
    """Index of the valid rollout whose reward is nearest the median of the valid rewards (first on ties)."""
    idx = np.flatnonzero(group.valid)
    if idx.size == 0:
        raise ValueError(f"group {group.key!r} has no valid rollout")
    r = group.rewards[idx]
    return int(idx[np.argmin(np.abs(r - np.median(r)))])


def accept_revision(old_rewards: np.ndarray, new_rewards: np.ndarray, new_valid: np.ndarray, *,
                    min_valid: int = MIN_QUERIES, max_shift: float = MAX_MEAN_SHIFT) -> tuple[bool, str]:
    """(accepted, reason) for a rescored set of representatives: at least `min_valid` valid paired scores,
    at least two distinct new rewards, and |mean(new) - mean(old)| <= max_shift over the valid pairs."""
    ok = np.asarray(new_valid, bool)
    if int(ok.sum()) < min_valid:
        return False, f"only {int(ok.sum())} representatives rescored validly (need {min_valid})"
    new, old = np.asarray(new_rewards, np.float64)[ok], np.asarray(old_rewards, np.float64)[ok]
    if np.unique(np.round(new, 9)).size < 2:
        return False, "the revised rubric gives every representative the same reward"
    shift = float(new.mean() - old.mean())
    if abs(shift) > max_shift + 1e-9:  # 1e-9: the bound itself is allowed despite float rounding
        return False, f"mean reward moves by {shift:+.3f} (limit {max_shift})"
    return True, f"accepted (mean reward {shift:+.3f})"
