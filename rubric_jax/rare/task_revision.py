"""Task-level rubric revision in a run: the evidence kept from recent steps, the writer's request, the
rescoring of the representatives and the decision (RARE task level, or the MPO baseline).

"RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", section 3
("Task-Level Rubric Evolution") and the appendix on task-level updates. The rules themselves (which steps,
which groups, which rollout, when to accept) are the pure functions of rubric_jax.rare.task_level; this
module runs them against a scorer and a writer:

  1. every step, each scored group is kept as evidence (`EvidenceBuffer`, steps t-2..t, checkpointed);
  2. at a revision step t, per shared rubric: eligible groups -> 12..16 selected -> one representative each;
  3. the writer rewrites every criterion of the shared rubric (ids, order, maxima fixed; mode "revise");
  4. the judge rescores the same representatives under the written rubric (and, for representatives
     scored under an older version, under the current one too, so old and new compare the same rubric);
  5. RARE accepts with >= 12 valid pairs, >= 2 distinct new rewards and |mean shift| <= 0.35; the MPO
     baseline ("refine": merge refinements into the shared rubric) keeps any valid rewrite;
  6. an accepted rubric enters the rubric store after the step, so it scores from step t+1 on.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rubric_jax.rare import task_level as T
from rubric_jax.rare.scoring import Scorer
from rubric_jax.rubrics import Rubric

log = logging.getLogger(__name__)

MODES = ("revise", "refine")  # RARE task level | MPO baseline
STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TaskLevelConfig:
    mode: str = "revise"
    revisions: int = 5  # evenly spaced over the run
    min_queries: int = T.MIN_QUERIES
    max_groups: int = T.MAX_GROUPS
    min_valid: int = T.MIN_VALID_ROLLOUTS
    max_shift: float = T.MAX_MEAN_SHIFT

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"task-level mode must be one of {MODES}, got {self.mode!r}")
        if self.revisions < 1:
            raise ValueError(f"rare.revisions must be >= 1, got {self.revisions}")

    @property
    def accept_rule(self) -> bool:
        return self.mode == "revise"


class EvidenceBuffer:
    """Scored groups of the last `window` steps, per shared rubric. Only each group's representative text is
    kept (the rules need every rollout's reward, but the writer sees one rollout per group)."""

    def __init__(self, window: int = T.WINDOW):
        self.window = window
        self._groups: list[T.EvidenceGroup] = []

    def add(self, groups: Sequence[T.EvidenceGroup]) -> None:
        for g in groups:
            rep = T.representative(g) if g.valid.any() else -1
            kept = tuple(text if i == rep else "" for i, text in enumerate(g.responses))
            self._groups.append(dataclasses.replace(g, responses=kept))

    def prune(self, step: int) -> None:
        """After step `step`: forgets groups too old for a revision at the next step (its window starts at
        step + 2 - window)."""
        self._groups = [g for g in self._groups if g.step > step + 1 - self.window]

    def tasks(self) -> list[str]:
        return sorted({g.task for g in self._groups})

    def for_task(self, task: str) -> list[T.EvidenceGroup]:
        return [g for g in self._groups if g.task == task]

    def snapshot(self) -> tuple:
        return tuple(self._groups)

    def state(self, snapshot: tuple | None = None) -> dict:
        groups = self._groups if snapshot is None else snapshot
        return {"version": STATE_VERSION, "groups": [
            {"key": g.key, "step": g.step, "query": g.query, "responses": list(g.responses),
             "rewards": g.rewards.tolist(), "valid": g.valid.tolist(), "scores": g.scores.tolist(), "task": g.task,
             "rubric_version": g.version} for g in groups]}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if int(state.get("version", 0)) != STATE_VERSION:
            raise ValueError(f"evidence buffer state version {state.get('version')!r}; expected {STATE_VERSION}")
        self._groups = [T.EvidenceGroup(d["key"], int(d["step"]), d["query"], tuple(d["responses"]),
                                        np.asarray(d["rewards"], np.float64), np.asarray(d["valid"], bool),
                                        np.asarray(d["scores"], np.int32).reshape(len(d["rewards"]), -1),
                                        d["task"], int(d["rubric_version"])) for d in state["groups"]]


def evidence_groups(keys, tasks, versions, prompts, responses, rewards, groups, step: int) -> list[T.EvidenceGroup]:
    """This step's groups as evidence: a rollout counts as valid when every criterion was read."""
    return [T.EvidenceGroup(str(k), int(step), q, tuple(resp), np.asarray(r, np.float64),
                            np.asarray(gs.valid, bool).all(axis=1), np.asarray(gs.scores, np.int32), t, int(v))
            for k, t, v, q, resp, r, gs in zip(keys, tasks, versions, prompts, responses, rewards, groups)]


def task_description(task: str, rubric: Rubric) -> str:
    """What the revision request shows as its "query": the shared rubric's scope."""
    scope = rubric.description.strip() or f"every request of the task {task!r}"
    return (f"A shared rubric ({rubric.name!r}) scores all requests of one task: {scope}. The cases below are "
            f"representative responses to different requests of that task.")


def revise(task: str, rubric: Rubric, evidence: Sequence[T.EvidenceGroup], step: int, *, scorer: Scorer,
           write: Callable[[list], list], cfg: TaskLevelConfig, seed: int) -> dict[str, Any]:
    """One revision attempt of one shared rubric at `step`. Returns a JSON-able record; "status" is one of
    skipped | writer_failed | rescore_failed | rejected | accepted, and an accepted record is a rubric-store
    event (its "replaced" maps every id to the old and new criterion)."""
    from rubric_jax.rare.writer import WriteRequest

    rec: dict[str, Any] = {"key": task, "kind": cfg.mode, "step": int(step), "version": rubric.version}
    chosen = T.select_groups(T.eligible_groups(evidence, step, min_valid=cfg.min_valid),
                             min_queries=cfg.min_queries, max_groups=cfg.max_groups)
    if chosen is None:
        n = len({g.key for g in T.eligible_groups(evidence, step, min_valid=cfg.min_valid)})
        return rec | {"status": "skipped", "reason": f"{n} eligible queries (need {cfg.min_queries})"}
    reps = [T.representative(g) for g in chosen]
    means = [float(g.rewards[g.valid].mean()) for g in chosen]
    rank = np.argsort(np.argsort(means))
    request = WriteRequest(
        query=task_description(task, rubric), rubric=rubric, eligible=rubric.ids, count=len(rubric),
        direction="any", mode=cfg.mode, responses=tuple(g.responses[i] for g, i in zip(chosen, reps)),
        scores=np.stack([g.scores[i] for g, i in zip(chosen, reps)]),
        valid=np.ones((len(chosen), len(rubric)), bool), queries=tuple(g.query for g in chosen),
        notes=tuple(f"group mean reward {m:.2f} over {int(g.valid.sum())} valid rollouts (rank {int(k) + 1} of "
                    f"{len(chosen)}; step {g.step})" for g, m, k in zip(chosen, means, rank)))
    rec["queries"] = [g.key for g in chosen]
    outcome = write([request])[0]
    rec.update(attempts=int(outcome.attempts), errors=list(outcome.errors))
    if outcome.replacements is None:
        return rec | {"status": "writer_failed", "reason": "no valid rewrite after every attempt"}
    new = rubric.replace_criteria(outcome.replacements)
    rec["replaced"] = {c.id: {"old": rubric[c.id].to_dict(), "new": new[c.id].to_dict()} for c in rubric}

    # Rescore the representatives under the rewrite; those scored under an older version of the shared rubric
    # are scored under the current one as well, so that old and new rewards compare two rubrics on one text.
    stale = [j for j, g in enumerate(chosen) if g.version != rubric.version]
    jobs = [(j, new) for j in range(len(chosen))] + [(j, rubric) for j in stale]
    scored = scorer.score([chosen[j].query for j, _ in jobs], [[request.responses[j]] for j, _ in jobs],
                          [r for _, r in jobs], seed=seed)
    from rubric_jax.rare.sample_level import rare_rewards

    r_all = rare_rewards(scored)[:, 0].astype(np.float64)
    ok_all = np.asarray([gs.valid.all() for gs in scored])
    n = len(chosen)
    new_r, new_ok = r_all[:n], ok_all[:n].copy()
    old_r = np.asarray([g.rewards[i] for g, i in zip(chosen, reps)], np.float64)
    for k, j in enumerate(stale):
        old_r[j] = r_all[n + k]
        new_ok[j] &= ok_all[n + k]
    rec.update(reward_before=[round(float(x), 6) for x in old_r], reward_after=[round(float(x), 6) for x in new_r],
               rescored_valid=[bool(x) for x in new_ok], stale=len(stale),
               mean_shift=float(new_r[new_ok].mean() - old_r[new_ok].mean()) if new_ok.any() else None,
               distinct_after=int(np.unique(np.round(new_r[new_ok], 9)).size))
    if cfg.accept_rule:
        ok, why = T.accept_revision(old_r, new_r, new_ok, min_valid=cfg.min_queries, max_shift=cfg.max_shift)
        status = "accepted" if ok else ("rescore_failed" if int(new_ok.sum()) < cfg.min_queries else "rejected")
    else:
        ok, why, status = True, "refinement merged (MPO keeps every valid rewrite)", "accepted"
    log.info("task-level %s of %s at step %d: %s (%s)", cfg.mode, task, step, status, why)
    return rec | {"status": status, "reason": why}


def revision_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per revision step: attempts, acceptances and their reward shifts (rare/revision_*)."""
    if not records:
        return {}
    out = {"rare/revision_attempts": float(sum(r["status"] != "skipped" for r in records)),
           "rare/revision_skipped": float(sum(r["status"] == "skipped" for r in records)),
           "rare/revision_accepted": float(sum(r["status"] == "accepted" for r in records))}
    shifts = [r["mean_shift"] for r in records if r.get("mean_shift") is not None]
    if shifts:
        out["rare/revision_mean_shift"] = float(np.mean(shifts))
        out["rare/revision_distinct_rewards"] = float(np.mean([r["distinct_after"] for r in records
                                                               if r.get("mean_shift") is not None]))
    return out
