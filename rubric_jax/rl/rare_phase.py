"""The trainer's RARE reward path (`reward.judging="rare"`): per-query rubrics from the rubric store, integer
scores, sample-level replacement of saturated criteria, and the store kept identical on every process.

Methods (config.rare.level):
  "sample"  RARE sample-level replacement (configs/rare.py; direction negative | positive | mixed)
  "static"  score only, rubrics never change (configs/sample_static.py with per-query rubrics,
            configs/task_static.py with the shared rubric of each record's task)
Math and the statistics: docs/method.md §3; the procedure: rubric_jax.rare.sample_level.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Sequence

import numpy as np

from rubric_jax.judge import Judge, JudgeConfig
from rubric_jax.rare import sample_level
from rubric_jax.rare.scoring import LocalScorer
from rubric_jax.rare.store import RubricStore

log = logging.getLogger(__name__)

LEVELS = ("sample", "static")


@dataclasses.dataclass
class RareRuntime:
    cfg: Any  # config.rare
    store: RubricStore
    scorer: Any
    write: Any  # requests -> outcomes, or None (static)
    level_cfg: sample_level.SampleLevelConfig
    records_by_key: dict
    texts: list = dataclasses.field(default_factory=list)  # replacement events to write to texts.jsonl


def build(config, model, tokenizer, judge_model_id: str, default_rubric, records) -> RareRuntime:
    """The store, the scorer (the frozen base through our judge engine) and the criterion writer."""
    rc = config.rare
    if rc.level not in LEVELS:
        raise ValueError(f"rare.level must be one of {LEVELS}, got {rc.level!r}")
    store = RubricStore(default_rubric, config.rubric_source)
    for r in records:  # every record's first rubric loads now: a bad rubric fails before training starts
        store.initial(r)
    judge = Judge(model, tokenizer, JudgeConfig(mode=rc.score_mode, min_verdict_mass=rc.min_score_mass),
                  model_id=judge_model_id, max_response_tokens=config.judge.max_response_tokens)
    retry = None
    if rc.retry:
        # sampled (not greedy), so the retry's own seed makes it a fresh attempt
        retry = Judge(model, tokenizer, JudgeConfig(mode="generate", gen_temperature=1.0, gen_top_k=20,
                                                    gen_max_new_tokens=rc.retry_max_new_tokens),
                      model_id=judge_model_id, max_response_tokens=config.judge.max_response_tokens)
    scorer = LocalScorer(judge, retry, mode=rc.score_mode)
    write = None
    if rc.level == "sample":
        write = make_writer(rc, model, tokenizer, seed=config.seed)
    return RareRuntime(rc, store, scorer, write, sample_level.SampleLevelConfig(rc.direction, rc.budget),
                       {store.key(r): r for r in records})


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
    keys = [rt.store.key(r) for r in records]
    rubrics = [rt.store.get(r) for r in records]
    res = sample_level.step(prompts, responses, rubrics, keys, scorer=rt.scorer, write=rt.write,
                            cfg=rt.level_cfg, step_index=step, seed=step)
    seen, sat = np.zeros(len(records), np.int32), np.zeros(len(records), np.int32)
    for b, (k, rub, g) in enumerate(zip(keys, rubrics, res.groups)):
        before = {cid for ev in rt.store.history(k) for cid in ev["replaced"]}
        seen[b], sat[b] = sample_level.resaturation(rub, g, before)
    rows = {
        "status": res.status, "events": res.events, "reward_before": res.rewards_before,
        "cells": np.asarray([g.valid.size for g in res.groups], np.int32),
        "invalid": np.asarray([int((~g.valid).sum()) for g in res.groups], np.int32),
        "retried": np.asarray([g.retried for g in res.groups], np.int32),
        "recovered": np.asarray([g.recovered for g in res.groups], np.int32),
        "resat_seen": seen, "resat_saturated": sat,
        "criteria": np.asarray([len(r) for r in rubrics], np.int32),
        "saturated": np.asarray([len(sample_level.eligible_ids(r, g)) for r, g in zip(rubrics, res.groups)],
                                np.int32),
    }
    return res.rewards, rows


def commit(rt: RareRuntime, pooled: dict[str, Any]) -> None:
    """Applies the step's accepted replacements (pooled over processes, in process order) to the store."""
    for ev in pooled["events"]:
        if rt.store.apply_event(ev, rt.records_by_key.get(ev["key"])):
            rt.texts.append(ev)
        else:
            log.info("rare: %s was replaced twice in one step; kept the first", ev["key"])


def metrics(pooled: dict[str, Any]) -> dict[str, float]:
    out = sample_level.step_metrics(pooled["status"], pooled["events"], int(pooled["resat_seen"].sum()),
                                    int(pooled["resat_saturated"].sum()))
    cells = max(int(pooled["cells"].sum()), 1)
    retried = int(pooled["retried"].sum())
    out["judge/invalid_fraction"] = float(pooled["invalid"].sum()) / cells
    out["judge/retried_fraction"] = retried / cells
    out["judge/retry_recovered"] = float(pooled["recovered"].sum()) / retried if retried else 1.0
    out["reward/before_replacement"] = float(pooled["reward_before"].mean())
    out["active_criteria"] = float(pooled["criteria"].mean())
    # saturated criteria (full marks on every rollout) per group, before any replacement: what RARE replaces
    # and what the static baselines accumulate
    out["rare/saturated_fraction"] = float(pooled["saturated"].sum()) / max(int(pooled["criteria"].sum()), 1)
    return out


def pop_texts(rt: RareRuntime) -> dict[str, str]:
    """texts.jsonl entries for the events committed since the last call (what the writer proposed, and the
    scores before and after)."""
    out = {f"rare/replacement_{i}": json.dumps(ev, ensure_ascii=False) for i, ev in enumerate(rt.texts)}
    rt.texts.clear()
    return out
