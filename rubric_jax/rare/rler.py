"""The RLER baseline's per-query step, as the RARE paper runs it: a pool of written criteria per query, beside the
query's initial rubric, refreshed on every visit and pruned by how well each criterion separates the rollouts.

Sources: "RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", appendix
"Training and Rubric Evolution" (its RLER baseline), adapting "Reinforcement Learning with Evolving Rubrics"
(RLER). On each occurrence of a query q with rollouts y_1..y_G:

  1. propose  the writer reads q, the G rollouts and the active pool P_q and writes n new criteria N_q
              (1 <= n <= 5), each on the scale 0..m (one writer call for the whole batch);
  2. score    the judge scores I_q (the initial criteria), P_q and N_q together on the same G rollouts
              (one scorer call for the whole batch); an unreadable cell scores 0;
  3. reward   r_i = sum_{j in I u P u N} s_ij / sum_{j in I u P u N} m_j
              (new criteria count at once; an invalid cell keeps its m_j in the denominator, as RARE's
              reward does: rubric_jax.rewards.rare_reward);
  4. filter   for every adaptive criterion c in A = P u N, sigma_c = population std of s_ic over the rollouts
              whose cell is valid; drop sigma_c = 0 (and columns with fewer than two valid cells, whose std
              says nothing); keep the K = 5 largest sigma_c (ties: earlier candidates first) as the next P_q.

The initial criteria are always scored and never filtered or counted against K. Dropped criteria leave the
reward for good; the caller keeps them only to audit and to pass back as the request's `inactive`, so that
the writer does not propose them again.

The ranking uses the raw score std (RLER ranks by the within-group std of the score itself), not the std of
s/m. Every criterion this step writes has the same m (RlerConfig.max_points), so the two orders agree; they
can differ only for a pool carried over from a run with another max_points, where the raw std favours the
wider scale as RLER's would.

Like sample_level.py this module only orchestrates: the writer is any callable `requests -> outcomes`
(rubric_jax.rare.writer.write in "propose" mode), the judge a `Scorer` (rubric_jax.rare.scoring).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from rubric_jax.rewards import compiled as RC  # one program per padded criterion count
from rubric_jax.rare.sample_level import rare_rewards
from rubric_jax.rare.scoring import GroupScores, Scorer
from rubric_jax.rubrics import Criterion, Rubric

log = logging.getLogger(__name__)

# The paper's ranges: one to five new criteria a visit; single-digit scales, because the judge reads a score
# as one digit token.
MAX_NEW = 5
MAX_POINTS = 9
DIRECTION = "any"  # RLER does not steer the writer towards flaws or qualities
MODE = "propose"

WRITTEN, WRITER_FAILED = 1, 2
STATUS_NAMES = {WRITTEN: "written", WRITER_FAILED: "writer_failed"}


@dataclasses.dataclass(frozen=True)
class RlerConfig:
    new: int = 3  # criteria the writer is asked for on each visit (1..5)
    pool: int = 5  # K: adaptive criteria kept for the query's next visit
    max_points: int = 3  # the scale 0..m of every written criterion (1..9)

    def __post_init__(self):
        for name, value in (("new", self.new), ("pool", self.pool), ("max_points", self.max_points)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"rler.{name} must be an integer, got {value!r}")
        if not 1 <= self.new <= MAX_NEW:
            raise ValueError(f"rler.new (criteria written per visit) must be in 1..{MAX_NEW}, got {self.new}")
        if self.pool < 1:
            raise ValueError(f"rler.pool (adaptive criteria kept per query) must be >= 1, got {self.pool}")
        if not 1 <= self.max_points <= MAX_POINTS:
            raise ValueError(f"rler.max_points (scale of written criteria) must be in 1..{MAX_POINTS}, "
                             f"got {self.max_points}")


@dataclasses.dataclass
class RlerStepResult:
    rewards: np.ndarray  # (B, G) float32 under initial + pool + new criteria: what the update uses
    rewards_initial: np.ndarray  # (B, G) float32 under the initial criteria alone (logging only)
    groups: list[GroupScores]  # scores under `rubrics`
    rubrics: list[Rubric]  # per group: initial + pool + new, the column order of `groups`
    pools: list[tuple[Criterion, ...]]  # per group: the pool for the query's next visit
    dropped: list[tuple[Criterion, ...]]  # per group: adaptive criteria dropped this visit (append to inactive)
    added: list[tuple[Criterion, ...]]  # per group: the criteria written this visit
    stds: list[np.ndarray]  # per group: sigma of each adaptive column (pool then new), NaN below two valid cells
    events: list[dict]  # one JSON-able record per group
    status: np.ndarray  # (B,) int8: WRITTEN or WRITER_FAILED


# ---- pure pieces --------------------------------------------------------------------------------------------------

def criterion_stds(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(K,) population std of each column of `scores` (G, K) over the rows where `valid` (G, K) is true:

        sigma_c = sqrt( (1/n_c) sum_{i valid} (s_ic - mu_c)^2 ),  mu_c = (1/n_c) sum_{i valid} s_ic

    in raw score units (not divided by m_c; see the module docstring). A column with fewer than two valid
    cells gets NaN, since a spread cannot be observed there; a constant column gets exactly 0.0 (judged by
    min == max, so float rounding cannot keep a useless criterion alive)."""
    s = np.asarray(scores, np.float64)
    v = np.asarray(valid, bool)
    if s.ndim != 2 or v.shape != s.shape:
        raise ValueError(f"scores and valid must both be (G, K); got {s.shape} and {v.shape}")
    n = v.sum(axis=0)
    if s.shape[0] == 0:
        return np.full(s.shape[1], np.nan)
    mean = np.where(v, s, 0.0).sum(axis=0) / np.maximum(n, 1)
    std = np.sqrt(np.where(v, np.square(s - mean), 0.0).sum(axis=0) / np.maximum(n, 1))
    flat = np.where(v, s, np.inf).min(axis=0) == np.where(v, s, -np.inf).max(axis=0)
    std = np.where(flat, 0.0, std)
    return np.where(n >= 2, std, np.nan)


def select_pool(candidates: Sequence[Criterion], stds: Sequence[float], max_size: int
                ) -> tuple[tuple[Criterion, ...], tuple[Criterion, ...]]:
    """(kept, dropped): the candidates with sigma > 0 (NaN counts as no spread), the `max_size` largest
    sigmas of those kept, ties going to the earlier candidate. Both keep candidate order, so a surviving
    criterion keeps its place among the query's adaptive columns from visit to visit."""
    stds = np.asarray(stds, np.float64).reshape(-1)
    if len(candidates) != stds.shape[0]:
        raise ValueError(f"select_pool: {len(candidates)} candidates but {stds.shape[0]} stds")
    if max_size < 0:
        raise ValueError(f"select_pool: max_size must be >= 0, got {max_size}")
    spread = [k for k in range(len(candidates)) if np.isfinite(stds[k]) and stds[k] > 0]
    # sorted() is stable, so equal sigmas stay in candidate order
    keep = set(sorted(spread, key=lambda k: -stds[k])[:max_size])
    kept = tuple(c for k, c in enumerate(candidates) if k in keep)
    dropped = tuple(c for k, c in enumerate(candidates) if k not in keep)
    return kept, dropped


def slot_ids(step: int, count: int, taken: Iterable[str] = ()) -> tuple[str, ...]:
    """`count` fresh ids "rler_<step>_<k>" for the criteria written at training step `step`.

    The step makes ids from different visits of a query distinct; `taken` (every id the query has used:
    initial, pool, inactive, and slots already handed out this step) is skipped, which covers a query that
    occurs twice in one batch or an initial rubric that happens to use such a name. The ids are plain ASCII
    words, so they are valid Criterion ids and safe inside the writer's JSON and grammar."""
    if count < 0:
        raise ValueError(f"slot_ids: count must be >= 0, got {count}")
    taken = set(taken)
    out: list[str] = []
    k = 0
    while len(out) < count:
        cid = f"rler_{int(step)}_{k}"
        if cid not in taken:
            out.append(cid)
        k += 1
    return tuple(out)


def _accepted(outcome, slots: Sequence[str], max_points: int) -> tuple[tuple[Criterion, ...], list[str]]:
    """The outcome's new criteria in slot order, and why any were refused. The writer validates its own
    answers; this only guards the pool's invariants (one criterion per slot, the slot's id and scale)."""
    got = outcome.replacements or {}
    problems = []
    for cid, crit in got.items():
        if cid not in slots:
            problems.append(f"criterion for unknown slot {cid!r}")
        elif not isinstance(crit, Criterion) or crit.id != cid or crit.max_points != max_points:
            problems.append(f"slot {cid!r}: expected a Criterion with id {cid!r} and max_points {max_points}")
    if problems:
        return (), problems
    new = [got[c] for c in slots if c in got]
    return tuple(new), problems


def _std_json(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None  # strict JSON has no NaN


# ---- the step -----------------------------------------------------------------------------------------------------

def step(prompts: Sequence[str], responses: Sequence[Sequence[str]], initial_rubrics: Sequence[Rubric],
         pools: Sequence[Sequence[Criterion]], inactive: Sequence[Sequence[Criterion]], keys: Sequence[str], *,
         scorer: Scorer, write: Callable[[list], list], cfg: RlerConfig, step_index: int, seed: int
         ) -> RlerStepResult:
    """One training step's rewards for B groups under RLER (module docstring: propose, score, reward, filter).

    pools[b]: the query's active adaptive criteria from its previous visit (empty on the first);
    inactive[b]: every adaptive criterion the query has dropped so far (shown to the writer so it does not
    propose them again; never scored). keys[b]: the query's key, for the events. The caller carries
    `result.pools[b]` and `inactive[b] + result.dropped[b]` to the query's next visit.

    The writer runs before the judge (one judge pass per step, as in RLER), so its requests carry no scores:
    every cell is marked invalid. A group whose writer attempts all fail adds nothing this visit; its pool is
    still scored, rewarded and filtered.
    """
    from rubric_jax.rare.writer import WriteRequest, slot_criterion

    B = len(prompts)
    for name, seq in (("responses", responses), ("initial_rubrics", initial_rubrics), ("pools", pools),
                      ("inactive", inactive), ("keys", keys)):
        if len(seq) != B:
            raise ValueError(f"rler.step: {name} has {len(seq)} entries for {B} prompts")

    # 1. propose: one request per group, `cfg.new` placeholder slots after the initial criteria and the pool
    issued: dict[str, set[str]] = {}  # slot ids already given to a key this step (a query twice in a batch)
    requests, slots = [], []
    for b in range(B):
        init, pool, gone = initial_rubrics[b], tuple(pools[b]), tuple(inactive[b])
        taken = {c.id for c in (*init.criteria, *pool, *gone)} | issued.setdefault(keys[b], set())
        ids = slot_ids(step_index, cfg.new, taken)
        issued[keys[b]].update(ids)
        slots.append(ids)
        rub = Rubric(name=init.name, criteria=(*init.criteria, *pool,
                                               *(slot_criterion(c, cfg.max_points) for c in ids)))
        G = len(responses[b])
        requests.append(WriteRequest(query=prompts[b], rubric=rub, eligible=ids, count=len(ids),
                                     direction=DIRECTION, responses=tuple(responses[b]),
                                     scores=np.zeros((G, len(rub)), np.int32), valid=np.zeros((G, len(rub)), bool),
                                     mode=MODE, inactive=gone))
    outcomes = list(write(requests))
    if len(outcomes) != B:
        raise RuntimeError(f"rler.step: the writer returned {len(outcomes)} outcomes for {B} requests")

    status = np.full(B, WRITTEN, np.int8)
    added, notes = [], []
    for b, oc in enumerate(outcomes):
        new, problems = _accepted(oc, slots[b], cfg.max_points)
        if not new:
            status[b] = WRITER_FAILED
            log.warning("rler: no new criteria for %s this visit (%d attempts%s); scoring its pool of %d alone",
                        keys[b], int(getattr(oc, "attempts", 0)), "; " + "; ".join(problems) if problems else "",
                        len(pools[b]))
        added.append(new)
        notes.append(problems)

    # 2. score: initial + pool + new on the same G rollouts, every group in one call
    rubrics = [Rubric(name=initial_rubrics[b].name, criteria=(*initial_rubrics[b].criteria, *pools[b], *added[b]),
                      version=initial_rubrics[b].version, description=initial_rubrics[b].description)
               for b in range(B)]
    groups = scorer.score(list(prompts), [list(r) for r in responses], rubrics, seed=seed)

    # 3. reward, under everything scored and under the initial criteria alone
    rewards = rare_rewards(groups)
    rewards_initial = np.stack([
        np.asarray(RC.rare_reward(np.asarray(g.scores[:, :len(init)], np.float32), g.max_points[:len(init)],
                                  g.valid[:, :len(init)])[0])
        for g, init in zip(groups, initial_rubrics)]).astype(np.float32)

    # 4. filter the adaptive columns only
    new_pools, dropped, stds, events = [], [], [], []
    for b, (g, init) in enumerate(zip(groups, initial_rubrics)):
        n0 = len(init)
        cands = (*pools[b], *added[b])
        sd = criterion_stds(g.scores[:, n0:], g.valid[:, n0:])
        kept, gone = select_pool(cands, sd, cfg.pool)
        if status[b] == WRITER_FAILED:
            log.warning("rler: %s kept %d of its %d pool criteria without new ones", keys[b], len(kept), len(cands))
        new_pools.append(kept)
        dropped.append(gone)
        stds.append(sd)
        events.append(_event(keys[b], step_index, status[b], cands, sd, kept, added[b], outcomes[b], notes[b]))
    return RlerStepResult(rewards, rewards_initial, groups, rubrics, new_pools, dropped, added, stds, events,
                          status)


def _event(key, step_index, status, cands, sd, kept, added, outcome, notes) -> dict[str, Any]:
    """One group's visit as a JSON-able record: what was written, what left the pool and why, what stays."""
    kept_ids = {c.id for c in kept}
    dropped = []
    for c, s in zip(cands, sd):
        if c.id in kept_ids:
            continue
        reason = "too_few_valid" if not np.isfinite(s) else "zero_std" if s == 0 else "over_limit"
        dropped.append({"criterion": c.to_dict(), "std": _std_json(s), "reason": reason})
    return {
        "key": key, "step": int(step_index), "status": STATUS_NAMES[int(status)],
        "added": [c.to_dict() for c in added],
        "dropped": dropped,
        "pool": [{"id": c.id, "std": _std_json(s)} for c, s in zip(cands, sd) if c.id in kept_ids],
        "attempts": int(getattr(outcome, "attempts", 0)),
        "errors": [str(e) for e in getattr(outcome, "errors", [])] + list(notes),
    }


def step_metrics(result: RlerStepResult) -> dict[str, float]:
    """`events_metrics` of one process' step."""
    return events_metrics(result.status, result.events)


def events_metrics(status: np.ndarray, events: Sequence[dict]) -> dict[str, float]:
    """Per-step RLER statistics over the B groups (from their events, so a multi-process run can pool them):

      rler/writer_failure_rate  fraction of groups whose writer produced nothing usable
      rler/added                mean criteria written per group
      rler/pool_size            mean pool size after filtering
      rler/dropped              mean adaptive criteria dropped per group
      rler/kept_std             mean sigma over every criterion kept in a pool (absent when none is kept)
      rler/all_zero_std_rate    among groups with adaptive criteria, the fraction where none had sigma > 0
                                (a column with under two valid cells counts as zero): the whole adaptive
                                rubric was flat on that group. Kept criteria all have sigma > 0, so this is
                                "nothing kept, something dropped".
    """
    status = np.asarray(status)
    n = max(len(status), 1)
    mean = lambda xs: float(np.mean(xs)) if len(xs) else 0.0  # noqa: E731
    m = {"rler/writer_failure_rate": float(np.sum(status == WRITER_FAILED)) / n,
         "rler/added": mean([len(e["added"]) for e in events]),
         "rler/pool_size": mean([len(e["pool"]) for e in events]),
         "rler/dropped": mean([len(e["dropped"]) for e in events])}
    kept = [p["std"] for e in events for p in e["pool"]]
    if kept:
        m["rler/kept_std"] = float(np.mean(kept))
    with_adaptive = [e for e in events if e["pool"] or e["dropped"]]
    if with_adaptive:
        m["rler/all_zero_std_rate"] = float(np.mean([not e["pool"] for e in with_adaptive]))
    return m
