"""RARE's sample-level step: score each group under its query's rubric, replace saturated criteria, rescore the
replacements on the same responses, and return the rewards the update uses.

"RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", section 3
("Sample-Level Criterion Replacement") and the appendix on sample-level updates; the math is in docs/method.md §3:

  r_i    = sum_j s_ij / sum_j m_j                                     (reward under the current rubric)
  S      = { j : every rollout has a valid s_ij = m_j }                (eligible: saturated in the whole group)
  b      = min(B, |S|), B = 3                                          (replacement budget)
  r~_i   = (sum_{j not in U} s_ij + sum_{j in U} s'_ij) / sum_j m_j    (U: the b replaced criteria, s' their
                                                                        rescoring on the same G responses)
The update uses r~ after an accepted replacement and r otherwise. A replacement is accepted when the writer's
criteria pass validation (rubric_jax.rare.writer) and the judge reads every rescored cell; otherwise the old
criteria and rewards stay. Accepted events persist in the rubric store (rubric_jax.rare.store).

This module only orchestrates: scoring is a `Scorer`, writing is any callable `requests -> outcomes`, and the
numbers come from the pure functions of rubric_jax.rewards (pointwise, rare).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Sequence

import jax.numpy as jnp
import numpy as np

from rubric_jax import rewards as R
from rubric_jax.rewards import compiled as RC  # one program per padded criterion count
from rubric_jax.rare.scoring import GroupScores, Scorer
from rubric_jax.rubrics import Rubric

log = logging.getLogger(__name__)

DIRECTIONS = ("negative", "positive", "mixed")


@dataclasses.dataclass(frozen=True)
class SampleLevelConfig:
    direction: str = "negative"  # the paper's best variant
    budget: int = 3  # B

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"rare.direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.budget < 1:
            raise ValueError(f"rare.budget must be >= 1, got {self.budget}")


@dataclasses.dataclass
class StepResult:
    rewards: np.ndarray  # (B, G) what the update uses (r~ where a replacement was accepted, else r)
    rewards_before: np.ndarray  # (B, G) r under the rubrics the step started with
    groups: list[GroupScores]  # the scores under the starting rubrics
    events: list[dict]  # accepted replacements, JSON-able (store key, texts, scores before/after, statistics)
    status: np.ndarray  # (B,) int8 per group: NOT_TRIGGERED, ACCEPTED, WRITER_FAILED or RESCORE_FAILED
    rewrite_secs: float = 0.0  # wall time of writing and rescoring replacements (RARE's added cost)


NOT_TRIGGERED, ACCEPTED, WRITER_FAILED, RESCORE_FAILED = 0, 1, 2, 3


def rare_rewards(groups: Sequence[GroupScores]) -> np.ndarray:
    """(B, G) r_i = sum_j s_ij / sum_j m_j per group (invalid cells count 0)."""
    return np.stack([np.asarray(RC.rare_reward(np.asarray(g.scores, np.float32), g.max_points, g.valid)[0])
                     for g in groups]).astype(np.float32)


def eligible_ids(rubric: Rubric, g: GroupScores) -> tuple[str, ...]:
    """Ids of the criteria saturated in the whole group (RARE's eligible set S)."""
    sat = np.asarray(RC.saturated_criteria(np.asarray(g.scores, np.float32), g.valid, g.max_points))
    return tuple(c.id for c, s in zip(rubric.criteria, sat) if s)


def step(prompts: Sequence[str], responses: Sequence[Sequence[str]], rubrics: Sequence[Rubric],
         keys: Sequence[str], *, scorer: Scorer, write: Callable[[list], list] | None, cfg: SampleLevelConfig,
         step_index: int, seed: int) -> StepResult:
    """One training step's rewards for B groups. `keys`: each group's rubric-store key. `write=None` is the
    static baseline (score only)."""
    from rubric_jax.rare.writer import WriteRequest

    groups = scorer.score(prompts, responses, rubrics, seed=seed)
    r = rare_rewards(groups)
    out = r.copy()
    status = np.full(len(groups), NOT_TRIGGERED, np.int8)
    events: list[dict] = []
    if write is None:
        return StepResult(out, r, groups, events, status)

    todo, requests = [], []
    for b, (rub, g) in enumerate(zip(rubrics, groups)):
        elig = eligible_ids(rub, g)
        if elig:
            todo.append(b)
            requests.append(WriteRequest(query=prompts[b], rubric=rub, eligible=elig,
                                         count=min(cfg.budget, len(elig)), direction=cfg.direction,
                                         responses=tuple(responses[b]), scores=g.scores, valid=g.valid))
    if not todo:
        return StepResult(out, r, groups, events, status)
    t0 = time.perf_counter()
    outcomes = write(requests)
    status[todo] = WRITER_FAILED
    accepted = [(b, req, oc) for b, req, oc in zip(todo, requests, outcomes) if oc.replacements]
    if not accepted:
        return StepResult(out, r, groups, events, status, time.perf_counter() - t0)

    # Rescore only the new criteria, on the same G responses (fixed evidence, no new samples).
    subs = [Rubric(name=f"{rubrics[b].name}:replacements", criteria=tuple(oc.replacements.values()))
            for b, _, oc in accepted]
    rescored = scorer.score([prompts[b] for b, _, _ in accepted], [responses[b] for b, _, _ in accepted], subs,
                            seed=seed + 1)
    for (b, req, oc), sub, new in zip(accepted, subs, rescored):
        if not new.valid.all():
            status[b] = RESCORE_FAILED
            log.warning("rare: replacement for %s rejected: %d of %d rescored cells unreadable", keys[b],
                        int((~new.valid).sum()), new.valid.size)
            continue
        g, rub = groups[b], rubrics[b]
        cols = [rub.index(c.id) for c in sub.criteria]
        s_new, v_new = g.scores.copy(), g.valid.copy()
        s_new[:, cols] = new.scores
        v_new[:, cols] = True
        r_new = np.asarray(RC.rare_reward(np.asarray(s_new, np.float32), g.max_points, v_new)[0], np.float32)
        out[b] = r_new
        status[b] = ACCEPTED
        events.append(_event(keys[b], step_index, cfg.direction, rub, sub, cols, g, s_new, r[b], r_new, oc))
    return StepResult(out, r, groups, events, status, time.perf_counter() - t0)


def resaturation(rubric: Rubric, g: GroupScores, replaced_before: set[str]) -> tuple[int, int]:
    """(criteria of this rubric that an earlier replacement wrote, how many of them are saturated again)."""
    ids = [c.id for c in rubric.criteria if c.id in replaced_before]
    sat = set(eligible_ids(rubric, g))
    return len(ids), sum(i in sat for i in ids)


def _event(key, step_index, direction, rub: Rubric, sub: Rubric, cols, g: GroupScores, s_new, r_old, r_new,
           outcome) -> dict[str, Any]:
    """An accepted replacement as a JSON-able record, with its Table 3 statistics (rubric_jax.rewards.rare)."""
    m = jnp.asarray(g.max_points)
    sel = np.zeros(len(rub), bool)
    sel[cols] = True
    block = {k: float(v) for k, v in R.replacement_stats(jnp.asarray(s_new, jnp.float32), m, jnp.asarray(sel)).items()}
    by_polarity = {}
    for pol in ("negative", "positive"):
        ps = np.zeros(len(rub), bool)
        ps[[c for c, crit in zip(cols, sub.criteria) if crit.polarity == pol]] = True
        if ps.any():
            by_polarity[pol] = {k: float(v) for k, v in
                                R.set_stats(jnp.asarray(s_new, jnp.float32), m, jnp.asarray(ps)).items()}
    return {
        "key": key, "step": int(step_index), "direction": direction,
        "replaced": {c.id: {"old": rub[c.id].to_dict(), "new": c.to_dict()} for c in sub.criteria},
        "scores_before": g.scores[:, cols].tolist(), "scores_after": s_new[:, cols].tolist(),
        "reward_before": [round(float(x), 6) for x in r_old], "reward_after": [round(float(x), 6) for x in r_new],
        "attempts": int(outcome.attempts), "stats": block, "stats_by_polarity": by_polarity,
    }


def step_metrics(status: np.ndarray, events: Sequence[dict], resat_seen: int, resat_saturated: int
                 ) -> dict[str, float]:
    """Per-step RARE statistics over the (pooled) groups and events (docs/method.md §3; paper Table 3): trigger and
    event rates, writer and rescore failures, the replacement blocks' score, headroom, variance, opens-headroom
    and restores-variance rates and mean |A_rep| averaged over events, per-polarity criterion statistics, and
    the resaturation rate of criteria written by earlier replacements."""
    n = max(len(status), 1)
    m = {"rare/trigger_rate": float(np.sum(status != NOT_TRIGGERED)) / n,
         "rare/event_rate": float(np.sum(status == ACCEPTED)) / n,
         "rare/writer_failures": float(np.sum(status == WRITER_FAILED)),
         "rare/rescore_failures": float(np.sum(status == RESCORE_FAILED))}
    if events:
        for k in ("score", "headroom", "variance", "opens_headroom", "restores_variance", "mean_abs_adv"):
            m[f"rare/replacement_{k}"] = float(np.mean([e["stats"][k] for e in events]))
        m["rare/replaced_criteria"] = float(np.mean([len(e["replaced"]) for e in events]))
        for pol in ("negative", "positive"):
            got = [e["stats_by_polarity"][pol] for e in events if pol in e["stats_by_polarity"]]
            for k in ("headroom", "variance", "mean_abs_z", "headroom_rate"):
                if got:
                    m[f"rare/{pol}_{k}"] = float(np.mean([x[k] for x in got]))
    if resat_seen:
        m["rare/resaturation_rate"] = resat_saturated / resat_seen
    return m
