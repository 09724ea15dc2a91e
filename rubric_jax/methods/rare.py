"""The RARE reward method (`reward.method="rare"`): per-query rubrics from the rubric store, integer
scores, sample-level replacement of saturated criteria, and the store kept identical on every process.

Methods (config.rare.level):
  "sample"  RARE sample-level replacement (configs/rare.py; direction negative | positive | mixed)
  "static"  score only, rubrics never change (configs/sample_static.py with per-query rubrics,
            configs/task_static.py with the shared rubric of each record's task)
  "task"    RARE task-level revision of each task's shared rubric at evenly spaced steps (configs/rare_task.py)
  "mpo"     the MPO baseline: the same revision points, refinements merged without the acceptance test
            (configs/mpo.py)
  "rler"    the RLER baseline: per query, a pool of at most 5 written criteria beside the initial ones, new
            ones written on every visit, pruned by within-group score std (configs/rler.py)
Math and the statistics: docs/method.md §3; the procedures: rubric_jax.rare.sample_level and
rubric_jax.rare.task_revision.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Any, Sequence

import ml_collections
import numpy as np

from rubric_jax.config_checks import choice, fail, integer
from rubric_jax.judge import Judge, JudgeConfig
from rubric_jax.methods.rcrl.reward import SharedRewardSection, whole_rubric
from rubric_jax.rare import rler, sample_level, task_level, task_revision
from rubric_jax.rare.scoring import RubricScorer
from rubric_jax.rare.store import RubricStore
from rubric_jax.rl.plugins import BuildContext, Method, RewardBatch, RewardOut, register
from rubric_jax.rubrics import Criterion

log = logging.getLogger(__name__)

LEVELS = ("sample", "static", "task", "mpo", "rler")
TASK_LEVELS = {"task": "revise", "mpo": "refine"}  # level -> the writer's mode


@dataclasses.dataclass
class RareRuntime:
    cfg: Any  # config.rare
    store: RubricStore
    scorer: Any
    write: Any  # requests -> outcomes, or None (static)
    level_cfg: sample_level.SampleLevelConfig
    records_by_key: dict
    texts: list = dataclasses.field(default_factory=list)  # replacement events to write to texts.jsonl
    task_cfg: task_revision.TaskLevelConfig | None = None  # task | mpo
    evidence: task_revision.EvidenceBuffer | None = None
    revision_steps: tuple[int, ...] = ()
    rler_cfg: rler.RlerConfig | None = None
    pools: dict = dataclasses.field(default_factory=dict)  # rler: query id -> its active written criteria
    inactive: dict = dataclasses.field(default_factory=dict)  # rler: query id -> criteria it dropped

    @property
    def judge(self):
        """The local judge (None for a remote one): the trainer pads its shapes."""
        return getattr(self.scorer, "judge", None)


def initial_store(config, default_rubric, records) -> RubricStore:
    """The rubric store with every record's first rubric read (no model needed): a bad rubric fails before any
    model loads."""
    store = RubricStore(default_rubric, config.rubric_source)
    for r in records:
        store.initial(r)
    return store


def build(config, model, tokenizer, judge_model_id: str, default_rubric, records, *, judge=None,
          store: RubricStore | None = None) -> RareRuntime:
    """The store (`initial_store`, made here unless given), the scorer (our judge engine on `judge`, a (model,
    tokenizer) pair, default the frozen base `model` with `tokenizer`) and the criterion writer (the frozen base:
    config.judge.model moves the judging only; rare.writer=openai:... moves the writing). The settings were
    checked before (`RareMethod.validate`)."""
    rc = config.rare
    store = store if store is not None else initial_store(config, default_rubric, records)
    scorer = make_scorer(config, *(judge or (model, tokenizer)), judge_model_id)
    write = None
    if rc.level != "static":
        write = make_writer(rc, model, tokenizer, seed=config.seed)
    rt = RareRuntime(rc, store, scorer, write, sample_level.SampleLevelConfig(rc.direction, rc.budget),
                     {store.key(r): r for r in records})
    if rc.level == "rler":
        rt.rler_cfg = rler.RlerConfig(rc.rler_new, rc.rler_pool, rc.rler_max_points)
    if rc.level in TASK_LEVELS:
        rt.task_cfg = task_revision.TaskLevelConfig(TASK_LEVELS[rc.level], rc.revisions)
        rt.evidence = task_revision.EvidenceBuffer()
        rt.revision_steps = tuple(task_level.revision_steps(config.steps, rc.revisions))
        log.info("rare: %s revisions of the shared rubrics after steps %s", rc.level, list(rt.revision_steps))
        if not rt.revision_steps:
            log.warning("rare: a %d-step run has no room for a task-level revision (evidence needs 3 steps and a "
                        "revision must leave a step to apply to)", config.steps)
    return rt


def make_scorer(config, model, tokenizer, judge_model_id: str):
    """The training judge for integer scores: "local" (our judge engine on `model`, the run's judge model, hard
    or generate readout with one sampled retry) or "openai:MODEL@BASE_URL"."""
    rc = config.rare
    if rc.judge.startswith("openai:"):
        from rubric_jax.rare.scoring import RemoteScorer

        return RemoteScorer.from_spec(rc.judge, timeout_s=rc.judge_timeout_s, concurrency=rc.judge_concurrency,
                                      max_new_tokens=rc.judge_max_new_tokens, retry=rc.retry)
    if rc.judge != "local":
        raise ValueError(f"rare.judge must be 'local' or 'openai:MODEL@BASE_URL', got {rc.judge!r}")
    judge = Judge(model, tokenizer, JudgeConfig(mode=rc.score_mode, min_verdict_mass=rc.min_score_mass),
                  model_id=judge_model_id, max_response_tokens=config.judge.max_response_tokens)
    retry = None
    if rc.retry:
        # sampled (not greedy), so the retry's own seed makes it a fresh attempt
        retry = Judge(model, tokenizer, JudgeConfig(mode="generate", gen_temperature=1.0, gen_top_k=20,
                                                    gen_max_new_tokens=rc.retry_max_new_tokens),
                      model_id=judge_model_id, max_response_tokens=config.judge.max_response_tokens)
    return RubricScorer(judge, retry, mode=rc.score_mode)


def make_writer(rc, model, tokenizer, *, seed: int):
    """requests -> outcomes with the configured writer: "local" (the frozen base, JSON-schema-constrained
    decoding) or "openai:MODEL@BASE_URL" (key from OPENAI_API_KEY)."""
    from rubric_jax.rare import writer as W

    wcfg = W.WriterConfig(max_attempts=rc.writer_attempts, temperature=rc.writer_temperature,
                          max_response_tokens=rc.writer_max_response_tokens,
                          max_new_tokens=rc.writer_max_new_tokens, seed=seed)
    if rc.writer == "local":
        backend = W.LocalWriter(model, tokenizer, wcfg)
    elif rc.writer.startswith("openai:"):
        from rubric_jax.openai_client import ChatClient

        backend = W.RemoteWriter(ChatClient.from_spec(rc.writer), wcfg)
    else:
        raise ValueError(f"rare.writer must be 'local' or 'openai:MODEL@BASE_URL', got {rc.writer!r}")
    return lambda requests: W.write(backend, requests, wcfg, tokenizer=tokenizer)


def judge(rt: RareRuntime, records, prompts: Sequence[str], responses: Sequence[Sequence[str]], step: int
          ) -> tuple[np.ndarray, dict[str, Any]]:
    """(rewards (B, G) for the update, per-row results to pool). Rubric changes are not applied here: every
    process applies the pooled events in `commit`."""
    if rt.rler_cfg is not None:
        return _judge_rler(rt, records, prompts, responses, step)
    keys = [rt.store.key(r) for r in records]
    rubrics = [rt.store.get(r) for r in records]
    res = sample_level.step(prompts, responses, rubrics, keys, scorer=rt.scorer,
                            write=rt.write if rt.cfg.level == "sample" else None, cfg=rt.level_cfg,
                            step_index=step, seed=step)
    seen, sat = np.zeros(len(records), np.int32), np.zeros(len(records), np.int32)
    for b, (k, rub, g) in enumerate(zip(keys, rubrics, res.groups)):
        before = {cid for ev in rt.store.history(k) for cid in ev["replaced"]}
        seen[b], sat[b] = sample_level.resaturation(rub, g, before)
    rows = {
        "status": res.status, "events": res.events, "reward_before": res.rewards_before, **_health(res.groups),
        "resat_seen": seen, "resat_saturated": sat,
        "criteria": np.asarray([len(r) for r in rubrics], np.int32),
        "saturated": np.asarray([len(sample_level.eligible_ids(r, g)) for r, g in zip(rubrics, res.groups)],
                                np.int32),
        # writing and rescoring replacements (part of time/judge), per process
        "rewrite_secs": np.asarray([res.rewrite_secs], np.float64),
    }
    if rt.evidence is not None:
        rows["evidence"] = task_revision.evidence_groups(
            [r.id for r in records], keys, [rub.version for rub in rubrics], prompts, responses, res.rewards_before,
            res.groups, step)
    return res.rewards, rows


def _health(groups) -> dict[str, np.ndarray]:
    """Per group: cells scored, unreadable, retried and recovered by the retry."""
    return {"cells": np.asarray([g.valid.size for g in groups], np.int32),
            "invalid": np.asarray([int((~g.valid).sum()) for g in groups], np.int32),
            "retried": np.asarray([g.retried for g in groups], np.int32),
            "recovered": np.asarray([g.recovered for g in groups], np.int32)}


def _judge_rler(rt: RareRuntime, records, prompts, responses, step: int) -> tuple[np.ndarray, dict[str, Any]]:
    keys = [str(r.id) for r in records]
    spent = [0.0]

    def write(requests):
        t0 = time.perf_counter()
        try:
            return rt.write(requests)
        finally:
            spent[0] += time.perf_counter() - t0

    res = rler.step(prompts, responses, [rt.store.get(r) for r in records], [rt.pools.get(k, ()) for k in keys],
                    [rt.inactive.get(k, ()) for k in keys], keys, scorer=rt.scorer, write=write, cfg=rt.rler_cfg,
                    step_index=step, seed=step)
    rows = {"status": res.status, "rler_events": res.events, "reward_before": res.rewards_initial,
            **_health(res.groups), "criteria": np.asarray([len(r) for r in res.rubrics], np.int32),
            "rewrite_secs": np.asarray([spent[0]], np.float64)}
    return res.rewards, rows


def commit(rt: RareRuntime, pooled: dict[str, Any]) -> None:
    """Applies the step's accepted replacements (pooled over processes, in process order) to the store, and
    keeps the step's groups as task-level evidence (RLER: updates each query's pool)."""
    if rt.rler_cfg is not None:
        for ev in pooled["rler_events"]:
            k = ev["key"]
            cands = (*rt.pools.get(k, ()), *(Criterion.from_dict(d, f"rler[{k!r}]") for d in ev["added"]))
            kept = {p["id"] for p in ev["pool"]}
            rt.pools[k] = tuple(c for c in cands if c.id in kept)
            rt.inactive[k] = (*rt.inactive.get(k, ()), *(Criterion.from_dict(d["criterion"], f"rler[{k!r}]")
                                                         for d in ev["dropped"]))
            rt.texts.append(ev)
        return
    if rt.evidence is not None:
        rt.evidence.add(pooled["evidence"])
    for ev in pooled["events"]:
        if rt.store.apply_event(ev, rt.records_by_key.get(ev["key"])):
            rt.texts.append(ev)
        else:
            log.info("rare: %s was replaced twice in one step; kept the first", ev["key"])


def revision_due(rt: RareRuntime, step: int) -> bool:
    return rt.task_cfg is not None and step in rt.revision_steps


def revise(rt: RareRuntime, step: int, index: int = 0, count: int = 1) -> list[dict]:
    """This process' share of the step's task-level revisions (shared rubrics round-robin over processes):
    one record per shared rubric (rubric_jax.rare.task_revision.revise). Pool them, then `commit_revisions`."""
    out = []
    for i, task in enumerate(rt.evidence.tasks()):
        if i % count == index:
            out.append(task_revision.revise(task, rt.store.current(task), rt.evidence.for_task(task), step,
                                            scorer=rt.scorer, write=rt.write, cfg=rt.task_cfg,
                                            seed=10_000 + step))
    return out


def commit_revisions(rt: RareRuntime, records: Sequence[dict], step: int) -> dict[str, float]:
    """Applies the accepted revisions (they score from the next step on); every record goes to texts.jsonl."""
    for rec in records:
        if rec["status"] == "accepted" and not rt.store.apply_event(rec):
            log.warning("rare: revision of %s no longer matches the current rubric; not applied", rec["key"])
            rec["status"] = "stale"
        rt.texts.append(rec)
    rt.evidence.prune(step)
    return task_revision.revision_metrics(records)


def snapshot(rt: RareRuntime):
    """The state between steps, cheaply (rubrics and criteria are immutable); `state(rt, snapshot)` later."""
    return (rt.store.snapshot(), None if rt.evidence is None else rt.evidence.snapshot(), dict(rt.pools),
            dict(rt.inactive))


def state(rt: RareRuntime, snap=None) -> dict[str, Any]:
    """The checkpoint meta keys of the RARE state: "rubrics" (the store), "evidence" (task level: the groups
    of the last steps), "rler" (each query's pool and dropped criteria)."""
    store_snap, ev_snap, pools, inactive = snap if snap is not None else (None, None, rt.pools, rt.inactive)
    out = {"rubrics": rt.store.state(store_snap)}
    if rt.evidence is not None:
        out["evidence"] = rt.evidence.state(ev_snap)
    if rt.rler_cfg is not None:
        out["rler"] = {"pools": {k: [c.to_dict() for c in v] for k, v in pools.items()},
                       "inactive": {k: [c.to_dict() for c in v] for k, v in inactive.items()}}
    return out


def set_state(rt: RareRuntime, meta: dict[str, Any], where: str) -> None:
    for k in state(rt):
        if k not in meta:
            raise ValueError(f"{where} has no {k!r} state: it was written by a run without "
                             f"reward.method='rare', rare.level={rt.cfg.level!r}")
    rt.store.set_state(meta["rubrics"])
    if rt.evidence is not None:
        rt.evidence.set_state(meta["evidence"])
    if rt.rler_cfg is not None:
        load = lambda d: {k: tuple(Criterion.from_dict(c, f"{where}: rler[{k!r}]") for c in v)  # noqa: E731
                          for k, v in d.items()}
        rt.pools, rt.inactive = load(meta["rler"]["pools"]), load(meta["rler"]["inactive"])


def metrics(pooled: dict[str, Any]) -> dict[str, float]:
    if "rler_events" in pooled:
        out = rler.events_metrics(pooled["status"], pooled["rler_events"])
    else:
        out = sample_level.step_metrics(pooled["status"], pooled["events"], int(pooled["resat_seen"].sum()),
                                        int(pooled["resat_saturated"].sum()))
    cells = max(int(pooled["cells"].sum()), 1)
    retried = int(pooled["retried"].sum())
    out["judge/invalid_fraction"] = float(pooled["invalid"].sum()) / cells
    out["judge/retried_fraction"] = retried / cells
    out["judge/retry_recovered"] = float(pooled["recovered"].sum()) / retried if retried else 1.0
    # sample level: the reward before replacements; RLER: under the initial criteria alone
    out["reward/before_replacement"] = float(pooled["reward_before"].mean())
    out["active_criteria"] = float(pooled["criteria"].mean())
    if "saturated" in pooled:
        # saturated criteria (full marks on every rollout) per group, before any replacement: what RARE
        # replaces and what the static baselines accumulate
        out["rare/saturated_fraction"] = float(pooled["saturated"].sum()) / max(int(pooled["criteria"].sum()), 1)
    # the slowest process' seconds; time/rewrite is the part of time/judge spent writing and rescoring
    out["time/rewrite"] = float(pooled["rewrite_secs"].max())
    return out


def pop_texts(rt: RareRuntime) -> dict[str, str]:
    """texts.jsonl entries for the events committed since the last call (what the writer proposed, and the
    scores before and after; task-level revision records whatever their outcome)."""
    kind = lambda ev: "revision" if "kind" in ev else "replacement" if "replaced" in ev else "rler"  # noqa: E731
    out = {f"rare/{kind(ev)}_{i}": json.dumps(ev, ensure_ascii=False) for i, ev in enumerate(rt.texts)}
    rt.texts.clear()
    return out


@register("rare")
class RareMethod(SharedRewardSection, Method):
    """RARE and its baselines through the trainer's five calls; the state is the rubric store (and the level's
    evidence or RLER pools), kept under "rubrics", "evidence" and "rler" in the checkpoint's meta."""

    @staticmethod
    def validate(config) -> None:
        from rubric_jax.rare import DIRECTIONS
        from rubric_jax.rare.scoring import SCORE_MODES

        whole_rubric(config, "reward.method='rare' scores each prompt's rubric")
        choice(config, "rare.level", LEVELS)
        choice(config, "rare.direction", DIRECTIONS)
        choice(config, "rare.score_mode", SCORE_MODES)
        integer(config, "rare.budget", 1)
        if config.rare.level in TASK_LEVELS and config.rubric_source != "task":
            fail("rubric_source", config.rubric_source, f"rare.level={config.rare.level!r} revises each task's "
                                                        f"shared rubric: it needs rubric_source='task'")
        for field in ("judge", "writer"):  # where the scores and the criteria come from
            spec = config.rare[field]
            if spec != "local" and not (isinstance(spec, str) and spec.startswith("openai:")):
                fail(f"rare.{field}", spec, "must be 'local' or 'openai:MODEL@BASE_URL'")

    @classmethod
    def config_sections(cls) -> dict[str, dict]:
        # RARE (reward.method="rare"; docs/method.md section 3): integer scores, saturated-criterion replacement.
        return {"rare": dict(
            # sample (replace saturated criteria) | static (score only) | task (revise each task's shared rubric
            # at `revisions` evenly spaced steps) | mpo (task-level refinement without the acceptance test) |
            # rler (per-query pool of written criteria ranked by within-group std, beside the initial ones)
            level="sample",
            direction="negative",  # negative | positive | mixed
            budget=3,  # B: at most this many criteria replaced per group
            score_mode="hard",  # hard (argmax over the allowed digits) | generate (rationale, then "Score: N")
            min_score_mass=0.5,  # hard: unreadable when the allowed digits hold less next-token probability
            retry=True,  # an unreadable score is read once more in generate mode with its own seed
            retry_max_new_tokens=64,
            writer="local",  # local (the frozen base, JSON-schema-constrained) | openai:MODEL@BASE_URL
            writer_attempts=3, writer_temperature=0.2, writer_max_response_tokens=384, writer_max_new_tokens=1024,
            # the training judge: local (the frozen base through our forward) | openai:MODEL@BASE_URL (generate
            # mode over HTTP; key from OPENAI_API_KEY)
            judge="local", judge_max_new_tokens=256, judge_timeout_s=120.0, judge_concurrency=16,
            revisions=5,  # task | mpo: revision points, evenly spaced
            rler_new=3, rler_pool=5, rler_max_points=3)}  # rler: criteria written per visit (1-5), pool size, scale

    def summary_line(self) -> str | None:
        return (f"judge per step: {self.config.prompts_per_step * self.config.group_size} responses x each "
                f"prompt's criteria ({self.config.rare.score_mode} mode)")

    @classmethod
    def judge_line(cls, config, line: str) -> str:
        return line + (f"; RARE's scores come from {config.rare.judge} (rare.judge)"
                       if config.rare.judge.startswith("openai:") else "")

    def prepare(self, records: list) -> list:
        self.store = initial_store(self.config, self.default_rubric, records)
        self._check_remote()
        return records

    def _check_remote(self) -> None:
        """A remote judge or writer answers one test request before any model loads (as `evals.run` asks of
        its judges): a dead endpoint, wrong model name or key is one line in seconds, not a traceback after the
        load and the first rollouts."""
        from rubric_jax.errors import UserError
        from rubric_jax.openai_client import ChatError, test_request

        for field in ("judge", "writer"):
            spec = self.config.rare[field]
            if spec.startswith("openai:"):
                print(f"checking remote rare.{field} {spec} (one test request)", flush=True)
                try:
                    test_request(spec)
                except (ChatError, ValueError) as e:
                    raise UserError(f"config.rare.{field}={spec!r} did not answer a test request: {e}") from None

    def build(self, ctx: BuildContext) -> None:
        super().build(ctx)
        self.rt = build(self.config, ctx.base_local, ctx.tokenizer, ctx.judge_id, self.default_rubric,
                        ctx.records, judge=(ctx.judge_model, ctx.judge_tokenizer), store=self.store)

    @property
    def judge(self):
        return self.rt.judge

    def reward(self, batch: RewardBatch) -> RewardOut:
        # scoring, and writing and rescoring replacements (time/judge)
        r_bg, rows = judge(self.rt, batch.records, batch.prompts, batch.responses, batch.step)
        return RewardOut(r_bg, {"judge": rows})

    def commit(self, rows: dict[str, Any]) -> None:
        # every process applies every process' replacements, in process order
        commit(self.rt, rows["judge"])

    def metrics(self, rows: dict[str, Any], adv_bg, picked) -> dict[str, float]:
        return metrics(rows["judge"])

    def end_step(self, step: int, timer) -> dict[str, float]:
        if self.rt.evidence is None:
            return {}
        hosts = self.ctx.hosts
        with timer.phase("revise"):  # task level: revise the shared rubrics from steps t-2..t, used from t+1
            records_t = []
            if revision_due(self.rt, step):
                with hosts.local_context():
                    records_t = revise(self.rt, step, hosts.index, hosts.count)
                records_t = hosts.merged(records_t)
            return commit_revisions(self.rt, records_t, step)

    def snapshot(self):
        return snapshot(self.rt)

    def state(self, snap=None) -> dict[str, Any]:
        return state(self.rt, snap)

    def set_state(self, meta: dict[str, Any], where: str) -> None:
        set_state(self.rt, meta, where)

    def on_save(self, workdir: str) -> None:
        if self.ctx.hosts.index == 0:
            self.rt.store.export_jsonl(os.path.join(workdir, "rubrics.jsonl"))

    def texts(self) -> dict[str, str]:
        return pop_texts(self.rt)


# ---------------------------------------------------------------------------------------------
# Config files' building blocks (configs/rare.py, rare_task.py, mpo.py, rler.py and the static baselines)

def rare_overrides(c: ml_collections.ConfigDict, *, level: str, source: str) -> ml_collections.ConfigDict:
    """RARE's setting ("RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation",
    appendix "Training and Rubric Evolution"): the bundled script requests, integer rubric scores, G = 8,
    32 queries per step, GRPO advantages normalised by the group's std, a token-mean PPO loss clipped at 0.2
    with dual clip 3, k3 KL 0.001, lr 1e-6. The paper trains full parameters: --config.finetune=full
    --config.dtype=float32 does so; the default trains LoRA adapters."""
    c.data.path = "scripts"
    c.rubric = ""  # every bundled script record carries its rubric; "task" uses its type's shared rubric
    c.rubric_source = source
    c.reward.method = "rare"
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    c.rare.level = level
    c.prompts_per_step = 32
    c.group_size = 8
    c.loss.micro_batch_size = 8
    c.sampling.temperature = 1.0  # the RARE paper samples its scripts at temperature 1.0
    c.max_prompt_len = 1024
    c.max_completion_len = 2048
    c.judge.max_response_tokens = 2048
    c.optim.lr = 1e-6
    c.optim.warmup_steps = 0
    c.optim.schedule = "constant"
    c.loss.advantage = "grpo"
    c.loss.aggregation = "token_mean"
    c.loss.eps_low = c.loss.eps_high = 0.2
    c.loss.dual_clip = 3.0
    c.loss.kl_coef = 0.001
    c.loss.kl_kind = "k3"
    c.steps = 6  # two epochs (the paper's length) of the 90 bundled training requests at 32 per step
    return c


def rare_tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """RARE's additions to `tiny_overrides`: a group of 4 (saturation needs a group), one replacement per
    event, and short writer inputs and outputs."""
    c.group_size = 4
    c.max_completion_len = 24
    c.judge.max_response_tokens = 32
    c.loss.micro_batch_size = 8
    c.rare.budget = 1
    c.rare.writer_max_response_tokens = 48
    c.rare.writer_max_new_tokens = 512
    return c


def task_level_tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Task-level additions to `rare_tiny`: one video type, 4 requests a step for 4 steps, so the evidence of
    steps 0-2 holds the 12 distinct queries a revision needs, and the revision after step 2 applies at step 3."""
    c.data.task = "script_live_action"
    c.prompts_per_step = 4
    c.steps = 4
    c.loss.micro_batch_size = 16
    c.rare.writer_max_new_tokens = 2048  # a rewrite of all six criteria, every level described
    return c
