"""The held-out evaluation behind automatic curriculum pacing (reward.pacing="auto", or "monitor": the same
readings logged while the fixed schedule decides).

The rule that turns readings into arrivals is pure and lives in rubric_jax.rewards.pacing (with its source, the
RcRL paper's pacing study and future-work section). This module takes the readings:

  1. held-out prompts (`split_records`): the `prompts` records ranked first by sha256(seed, record id), taken out of
     the training set. `PromptDataset` trains on whatever list it is given, so the trainer builds it from the
     remaining records and the policy never trains on a prompt it is measured on. The ranking depends only on the
     ids, not on the file's order, so the set is the same on every process and after a resume. Only when removing
     them would leave fewer than `min_train` records (a tiny prompt file) do the held-out prompts stay in training
     (`HeldOut.disjoint` False, with a warning).
  2. the base policy's answers (`base_responses`): greedy, generated once and cached in a JSON-able dict keyed by
     the base weights' fingerprint, the encoded prompts and the token budget; the cache goes into the checkpoint,
     so a resumed run does not regenerate it, and a cache whose key does not match is regenerated.
  3. a reading (`measure`): the current policy answers the same prompts greedily (deterministic: no sampling noise
     in a 16-prompt estimate); the judge compares policy and base answers on one criterion with pairing "all" on
     the pair, i.e. both orders averaged (docs/method.md, "Both orders"); the reading is the policy's win rate
     p_c(policy > base) averaged over prompts, in [0, 1]. A policy that still equals the base gives exactly 1/2.

`advance` is the one call per training step: reading when due, decision, reference reading of an arriving
criterion (re-judging the same policy answers when the step already generated them), weights and metrics.
Several processes each answer and judge a contiguous block of the held-out prompts on their own devices
(`hosts.local_context()`); the per-prompt results are pooled with `hosts.merged`, so every process holds the
same readings and makes the same decision.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
from typing import Any, Callable, Sequence

import numpy as np

from rubric_jax.judge.common import model_fingerprint
from rubric_jax.rewards import pacing as P
from rubric_jax.sampling import sample

log = logging.getLogger(__name__)

Generate = Callable[[Any, Sequence[Sequence[int]]], list]  # (model, prompt ids) -> one answer (str) per prompt


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """The held-out prompt records (in ranking order) and whether they were removed from training."""

    records: tuple
    disjoint: bool


def _rank(seed: int, record_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{record_id}".encode("utf-8")).hexdigest()


def split_records(records: Sequence, cfg: P.PacingConfig, *, min_train: int = 1) -> tuple[list, HeldOut]:
    """(training records, held-out prompts): the cfg.prompts records ranked first by sha256(cfg.seed, id), removed
    from training unless fewer than `min_train` (e.g. prompts_per_step) would remain. Training records keep their
    order. Give the trainer's `PromptDataset` the returned training records."""
    records = list(records)
    if not records:
        raise ValueError("pacing: no prompt records to hold out from")
    ranked = sorted(range(len(records)), key=lambda i: _rank(cfg.seed, records[i].id))
    chosen = ranked[:cfg.prompts]
    held = tuple(records[i] for i in chosen)
    if len(records) - len(chosen) >= min_train:
        taken = set(chosen)
        return [r for i, r in enumerate(records) if i not in taken], HeldOut(held, True)
    log.warning("pacing: %d records cannot spare %d held-out prompts and keep %d for training: the held-out "
                "prompts are also trained on", len(records), cfg.prompts, min_train)
    return records, HeldOut(held, False)


def greedy_generator(tokenizer, max_new_tokens: int, prompt_length: int | None = None) -> Generate:
    """Greedy answers as text, one per prompt (rubric_jax.sampling.sample at temperature 0)."""

    def generate(model, prompt_ids):
        out = sample(model, [list(p) for p in prompt_ids], max_new_tokens=max_new_tokens, num_samples=1,
                     temperature=0.0, eos_ids=tokenizer.eos_ids, pad_id=tokenizer.pad_id, prompt_length=prompt_length)
        return [tokenizer.decode(c) for c in out.completions()]

    return generate


@dataclasses.dataclass
class PacingRuntime:
    """Everything pacing holds across steps; `state` and `base_cache` are what the checkpoint keeps."""

    cfg: P.PacingConfig
    heldout: HeldOut
    criteria: list  # in curriculum order (rubric_jax.methods.rcrl.reward.ordered_criteria)
    prompt_ids: list  # the held-out prompts encoded for the policy
    generate: Generate
    max_new_tokens: int
    alpha: float = 0.5
    mode: str = "emphasis"
    state: P.PacingState = dataclasses.field(default_factory=P.PacingState)
    base_cache: dict | None = None  # {"key": {...}, "responses": [str, ...]}: see base_responses
    base_generations: int = 0  # times the base answers were generated in this process (1 per run, 0 on resume)
    fingerprint: Callable[[Any], str] = model_fingerprint  # identifies the base weights in the cache key
    fixed_interval: int = 0  # > 0: reward.pacing="monitor", arrivals on this fixed schedule (P.decide_fixed)


def build(cfg: P.PacingConfig, heldout: HeldOut, criteria: Sequence, tokenizer, *, max_new_tokens: int,
          alpha: float = 0.5, mode: str = "emphasis", encode: Callable[[Any], list] | None = None,
          prompt_length: int | None = None, generate: Generate | None = None,
          fingerprint: Callable[[Any], str] = model_fingerprint, fixed_interval: int = 0) -> PacingRuntime:
    """The runtime for a run. `encode(record) -> prompt ids` (the trainer's chat template and truncation; default
    the tokenizer's chat template); `generate` and `fingerprint` replace the greedy sampler and the weights'
    fingerprint (tests with stand-in models); `fixed_interval` > 0 keeps the fixed schedule (monitor mode)."""
    if not criteria:
        raise ValueError("pacing needs the rubric's criteria in curriculum order")
    if not heldout.records:
        raise ValueError("pacing: no held-out prompts")
    encode = encode or (lambda r: tokenizer.encode_chat(r.prompt, system=r.system))
    generate = generate or greedy_generator(tokenizer, max_new_tokens, prompt_length)
    return PacingRuntime(cfg, heldout, list(criteria), [list(encode(r)) for r in heldout.records], generate,
                         int(max_new_tokens), float(alpha), mode, fingerprint=fingerprint,
                         fixed_interval=int(fixed_interval))


# ---------------------------------------------------------------------------------------------------------------
# processes: each answers and judges a block of the held-out prompts; results pooled in process order


def _block(n: int, hosts) -> tuple[int, int]:
    index, count = (0, 1) if hosts is None else (hosts.index, hosts.count)
    edges = np.linspace(0, n, count + 1).round().astype(int)
    return int(edges[index]), int(edges[index + 1])


def _local(hosts):
    return contextlib.nullcontext() if hosts is None else hosts.local_context()


def _pool(obj, hosts):
    return obj if hosts is None or not hosts.multi else hosts.merged(obj)


# ---------------------------------------------------------------------------------------------------------------
# readings


def cache_key(rt: PacingRuntime, base_model) -> dict:
    """What the base answers depend on: the base weights, the encoded prompts, the token budget."""
    h = hashlib.sha256()
    for ids in rt.prompt_ids:
        h.update(np.asarray(ids, np.int64).tobytes())
        h.update(b"|")
    return {"model": rt.fingerprint(base_model), "prompts": h.hexdigest()[:16],
            "ids": [r.id for r in rt.heldout.records], "max_new_tokens": rt.max_new_tokens}


def base_responses(rt: PacingRuntime, base_model, hosts=None) -> list[str]:
    """The base policy's greedy answers to every held-out prompt, generated on the first call and cached."""
    key = cache_key(rt, base_model)
    cache = rt.base_cache
    if cache is not None and cache.get("key") == key:
        return list(cache["responses"])
    if cache is not None:
        log.info("pacing: cached base answers were made for %s, not %s: regenerating", cache.get("key"), key)
    lo, hi = _block(len(rt.prompt_ids), hosts)
    with _local(hosts):
        mine = list(rt.generate(base_model, rt.prompt_ids[lo:hi])) if hi > lo else []
    responses = [str(r) for r in _pool(mine, hosts)]
    if len(responses) != len(rt.prompt_ids):
        raise RuntimeError(f"pacing: {len(responses)} base answers for {len(rt.prompt_ids)} held-out prompts")
    rt.base_cache = {"key": key, "responses": responses}
    rt.base_generations += 1
    return list(responses)


def measure(rt: PacingRuntime, positions: Sequence[int], *, policy_model, base_model, judge, hosts=None,
            policy_texts: list[str] | None = None) -> tuple[list[float], list[str]]:
    """(win rate per curriculum position in `positions`, this process' policy answers).

    The policy answers its block of held-out prompts greedily (unless `policy_texts`, answers this process made
    earlier in the step, are given); for each criterion the judge compares every answer with the base answer to
    the same prompt in both orders; the per-prompt win rates p_c(policy > base) are pooled over processes and
    averaged."""
    base = base_responses(rt, base_model, hosts)
    lo, hi = _block(len(rt.prompt_ids), hosts)
    records = rt.heldout.records[lo:hi]
    with _local(hosts):
        if policy_texts is None:
            policy_texts = list(rt.generate(policy_model, rt.prompt_ids[lo:hi])) if hi > lo else []
        if len(policy_texts) != hi - lo:
            raise ValueError(f"pacing: {len(policy_texts)} policy answers for {hi - lo} held-out prompts")
        mine = np.zeros((hi - lo, len(positions)), np.float64)
        if hi > lo:
            for k, pos in enumerate(positions):
                # Group [policy, base] with pairing "all": the one pair judged in both orders; row 0 is the policy.
                results = judge.pairwise_batch([r.prompt for r in records],
                                               [[p, b] for p, b in zip(policy_texts, base[lo:hi])],
                                               [rt.criteria[pos]], pairing="all", seed=0, group_ids=range(lo, hi))
                mine[:, k] = [float(np.asarray(res.win_rates)[0, 0]) for res in results]
    per_prompt = np.asarray(_pool(mine, hosts), np.float64).reshape(-1, len(positions))
    rates = [float(np.clip(per_prompt[:, k].mean(), 0.0, 1.0)) for k in range(len(positions))]
    return rates, policy_texts


def advance(rt: PacingRuntime, step: int, *, policy_model, base_model, judge, hosts=None,
            timer=None) -> tuple[np.ndarray, dict[str, float]]:
    """Pacing for the start of `step`: (lambda_c over the criteria in curriculum order, metrics).

    Reads the newest criterion when due (`rewards.pacing.reading_due`), decides (`decide`, or `decide_fixed` in
    monitor mode), and on an arrival
    takes the new criterion's reference reading (not for the last criterion: nothing is decided after it).
    `rt.state` changes only when the whole call succeeds. With a `timer` (rl.metrics.PhaseTimer) the time is
    its phase "pacing" (time/pacing); without one the metrics carry time/pacing themselves.

    Metrics: pacing/active_criteria, pacing/arrived (0/1), pacing/steps_since_arrival, pacing/reason_<reason>
    = 1 (one of rewards.pacing.REASONS); on a reading pacing/heldout_win_rate (newest criterion, before the
    decision) and, with enough readings, pacing/improvement (D_m); on an arrival pacing/arrival_win_rate (the
    new criterion's reference reading)."""
    t0 = time.perf_counter()
    cfg, num = rt.cfg, len(rt.criteria)
    metrics: dict[str, float] = {}
    with (timer.phase("pacing") if timer is not None else contextlib.nullcontext()):
        state, texts = rt.state, None
        kw = dict(policy_model=policy_model, base_model=base_model, judge=judge, hosts=hosts)
        if P.reading_due(state, step, cfg, num):
            (rate,), texts = measure(rt, [state.num_active - 1], **kw)
            state = P.record(state, step, rate)
            metrics["pacing/heldout_win_rate"] = rate
            d = P.improvement(state.history, cfg.window)
            if d is not None:
                metrics["pacing/improvement"] = d
        if rt.fixed_interval:
            state, arrived, reason = P.decide_fixed(state, step, rt.fixed_interval, num)
        else:
            state, arrived, reason = P.decide(state, step, cfg, num)
        if arrived and state.num_active < num:
            (rate,), texts = measure(rt, [state.num_active - 1], policy_texts=texts, **kw)
            state = P.record(state, step, rate)
            metrics["pacing/arrival_win_rate"] = rate
    rt.state = state
    if arrived:
        log.info("pacing: criterion %d (%s) arrives at step %d (%s)", state.num_active,
                 getattr(rt.criteria[state.num_active - 1], "id", "?"), step, reason)
    metrics.update({"pacing/active_criteria": float(state.num_active), "pacing/arrived": float(arrived),
                    "pacing/steps_since_arrival": float(step - state.last_arrival), f"pacing/reason_{reason}": 1.0})
    if timer is None:
        metrics["time/pacing"] = time.perf_counter() - t0
    return P.weights_from_state(state, num, rt.alpha, rt.mode), metrics


# ---------------------------------------------------------------------------------------------------------------
# checkpoint


def snapshot(rt: PacingRuntime) -> P.PacingState:
    """The state between steps (immutable: no copy)."""
    return rt.state


def state_dict(rt: PacingRuntime, state: P.PacingState | None = None) -> dict:
    """The checkpoint meta's "pacing" entry: the decision state (default the current one; give a `snapshot` to
    save the state from before an interrupted step) and the base answers."""
    return {"state": (state or rt.state).to_dict(), "heldout": [r.id for r in rt.heldout.records],
            "base_cache": rt.base_cache}


def set_state(rt: PacingRuntime, entry: dict | None, where: str) -> None:
    """Restores `state_dict`'s entry (meta["pacing"]); a missing entry or one from other held-out prompts or a
    longer rubric raises, naming `where` (e.g. "checkpoint 40 in /w/checkpoints")."""
    if entry is None:
        raise ValueError(f"{where} holds no pacing state: it was written by a run with reward.pacing='fixed' "
                         f"(resume with the pacing it was trained with, or start in another workdir)")
    state = P.PacingState.from_dict(entry.get("state"))
    if state.num_active > len(rt.criteria):
        raise ValueError(f"{where}: pacing state has {state.num_active} active criteria, the rubric {len(rt.criteria)}")
    ids = [r.id for r in rt.heldout.records]
    if entry.get("heldout") != ids:
        raise ValueError(f"{where}: pacing was measured on held-out prompts {entry.get('heldout')!r:.200}, this run "
                         f"holds out {ids!r:.200} (pacing.prompts, pacing.seed or the data changed)")
    cache = entry.get("base_cache")
    ok = (isinstance(cache, dict) and isinstance(cache.get("key"), dict) and isinstance(cache.get("responses"), list)
          and len(cache["responses"]) == len(ids) and all(isinstance(r, str) for r in cache["responses"]))
    if cache is not None and not ok:
        log.warning("%s: unreadable pacing base_cache: the base answers will be regenerated", where)
    rt.state, rt.base_cache = state, (cache if ok else None)
