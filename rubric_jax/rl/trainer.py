"""The GRPO training loop: sample -> judge -> reward -> advantages -> update -> log -> save.

`train(config, workdir)` is the whole job. The reward is the method's (found by name from the config through
rubric_jax.rl.plugins: the trainer never asks which one it holds) plus the reward terms'. Everything random is derived from (config.seed, step), and the data iterator's state,
the trained parameters (LoRA adapters, or every weight with finetune="full"), the optimizer state and the method's
state are checkpointed together, so a killed run restarted with the same command continues exactly where it
stopped.

Shapes (rubric_jax.rl.shapes): prompts are padded to one width for the run and completions trimmed to a
rung of a 4-rung ladder, so each jitted program compiles at most 4 times; compiled programs persist in
<workdir>/jax_cache (config.compilation_cache_dir) for the next run in the same workdir.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rubric_jax import progress as inner_progress
from rubric_jax.rewards.compiled import advantages, zero_spread_mask
from rubric_jax.rl.plugins import RewardBatch, TermBatch, checked
from rubric_jax.rl import diagnostics, dynamic, preflight
from rubric_jax.rl.checkpoint import Checkpointer, SaveFailedError
from rubric_jax.rl.hosts import merge_rows
from rubric_jax.rl.lock import WorkdirLock
from rubric_jax.rl.metrics import CompileCounter, ConsoleProgress, MetricsWriter, PhaseTimer
from rubric_jax.rl.policy import NonFiniteError, Policy, RolloutBatch, all_finite
from rubric_jax.rl.profiling import maybe_profile
from rubric_jax.rl.setup import (DEFAULT_MODEL, Setup, build, encode_prompt, judge_record, parse_mesh,  # noqa: F401
                                 run_summary, select_tasks)
from rubric_jax.rl.stopping import Stopped, StopSignals
from rubric_jax.rl.shapes import (JudgePadding, ShapePlan, compilation_cache, fit_rollout_batch, padding_counts,
                                  padding_metrics)
from rubric_jax.rl.workdir import STATE_KEYS, check_prompts, check_resume, run_record
from rubric_jax.sampling import sample

log = logging.getLogger(__name__)

def _state_dict(finetune: str, trainable, opt_state) -> dict:
    return {STATE_KEYS[finetune]: trainable, "opt_state": opt_state}


def _train_state(policy: Policy) -> dict:
    return _state_dict(policy.finetune, policy.trainable, policy.opt_state)


def _saved_finetune(ckpt: Checkpointer, step: int) -> str | None:
    """The mode checkpoint `step` was written in, from the top-level keys of its saved state; None when the
    metadata cannot be read (the restore then reports what it finds)."""
    keys = ckpt.saved_keys(step) or set()
    return next((mode for mode, key in STATE_KEYS.items() if key in keys), None)


def _restore(setup: Setup, ckpt: Checkpointer) -> int:
    step = ckpt.latest_step()
    if step is None:
        return 0
    mode, saved = setup.policy.finetune, _saved_finetune(ckpt, step)
    if saved is not None and saved != mode:
        raise ValueError(f"checkpoint {step} in {ckpt.directory} was written with finetune={saved!r} and this run "
                         f"has finetune={mode!r}: a run cannot switch between 'lora' and 'full' (resume with "
                         f"finetune={saved!r}, or start the new mode in another workdir)")
    check_prompts(os.path.dirname(ckpt.directory), step, ckpt.read_meta(step), setup.data_iter.get_state(),
                  setup.config)
    state, meta = ckpt.restore(step, target_state=_train_state(setup.policy))
    bad = _non_finite_leaf(state[STATE_KEYS[mode]])
    if bad is not None:  # written before updates were checked, or by another program: training on it is garbage
        raise NonFiniteError(f"checkpoint {step} in {ckpt.directory} holds non-finite weights ({bad}): refusing to "
                             f"resume from it; move that step's folder aside to resume from an earlier one")
    setup.policy.trainable = state[STATE_KEYS[mode]]
    setup.policy.opt_state = state["opt_state"]
    setup.policy.total_bad_steps = int(meta.get("skipped_updates", 0))
    setup.data_iter.set_state(meta["data"])
    setup.method.set_state(meta, f"checkpoint {step} in {ckpt.directory}")
    for term in setup.terms:
        term.set_state(meta)
    setup.entropy_head = list(meta.get("entropy_head", []))
    _check_judge(meta.get("judge"), judge_record(setup), f"checkpoint {step} in {ckpt.directory}")
    log.info("resumed from %s at step %d", ckpt.directory, step)
    return step


def _non_finite_leaf(tree) -> str | None:
    """The path of the first weight array of `tree` holding a NaN or an infinity, else None."""
    if bool(all_finite(tree)):
        return None
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
        if jnp.issubdtype(x.dtype, jnp.inexact) and not bool(jnp.isfinite(x).all()):
            return jax.tree_util.keystr(path)
    return "?"


def _check_judge(saved: dict | None, now: dict, where: str) -> None:
    """A resume whose judge differs from the one the checkpoint's steps were rewarded by (another judge.model,
    dtype or checkpoint) goes on, since nothing saved depends on the judge, but says so: the reward changed
    mid-run. Checkpoints from before the judge was recorded have nothing to compare."""
    if saved and saved.get("id") != now["id"]:
        log.warning("%s was rewarded by judge %s (judge.model=%r) and this run judges with %s (judge.model=%r): "
                    "the reward changes from here on", where, saved.get("id"), saved.get("model", ""), now["id"],
                    now["model"])


def rollout_batch(out, adv_b: np.ndarray, shapes: ShapePlan | None = None, pad_id: int = 0,
                  longest: int | None = None) -> RolloutBatch:
    """The update's batch; with `shapes`, prompt columns at the run's width and completion columns trimmed to
    the ladder rung of the longest completion (rubric_jax.rl.shapes: the loss is unchanged). `longest`: the
    longest completion over all processes (they must agree on the width), default this batch's."""
    if shapes is None:
        return fit_rollout_batch(out, adv_b)
    longest = int(np.max(out.lengths, initial=0)) if longest is None else longest
    return fit_rollout_batch(out, adv_b, prompt_width=shapes.prompt_width,
                             completion_width=shapes.completion_width(longest), pad_id=pad_id)


def prompt_keys(key, first: int, count: int):
    """One key per prompt from its index in the step's global batch: a prompt's samples do not depend on
    which process draws them or what else is in its batch."""
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(first, first + count))


@dataclasses.dataclass
class SampledBatch:
    """One batch of prompts sampled, judged and rewarded in a step (dynamic sampling may take several)."""

    records: list
    out: Any  # the sampler's SampleOutput
    rows: dict[str, Any]  # per-group results of this process, pooled across batches and processes
    reward: np.ndarray  # (B, G) with bonuses
    keep: np.ndarray  # (B,) groups fit for the update (dynamic sampling: spread > min_spread and not dropped)
    picked: dict[str, np.ndarray]  # the method's per-group arrays for the groups the update uses (RewardOut)


def sample_batch(setup: Setup, step: int, key, index: int, timer: PhaseTimer) -> SampledBatch:
    """Batch `index` of the step: sample -> judge -> reward on this process' devices. Batch 0 draws its
    randomness exactly as a step without dynamic sampling does; batch i > 0 from fold_in(key, 1000 + i), and its
    groups have global ids i * prompts_per_step + (index in the step's batch)."""
    cfg, tok, g, hosts = setup.config, setup.tokenizer, setup.config.group_size, setup.hosts
    records = next(setup.data_iter)
    first = index * cfg.prompts_per_step + setup.dataset.global_offset
    group_ids = range(first, first + len(records))
    bkey = key if index == 0 else jax.random.fold_in(key, 1000 + index)
    prompts = [r.prompt for r in records]
    rows: dict[str, Any] = {}
    with hosts.local_context():
        with timer.phase("sample"):
            encoded = [encode_prompt(tok, r, cfg.max_prompt_len) for r in records]
            out = sample(setup.local_policy().model(), [e[0] for e in encoded],
                         max_new_tokens=cfg.max_completion_len, num_samples=g,
                         temperature=cfg.sampling.temperature, top_k=cfg.sampling.top_k, top_p=cfg.sampling.top_p,
                         min_p=cfg.sampling.min_p, eos_ids=tok.eos_ids, pad_id=tok.pad_id,
                         prompt_keys=prompt_keys(jax.random.fold_in(bkey, 0), first, len(records)),
                         prompt_length=None if setup.shapes is None else setup.shapes.prompt_width)
            # every process trims its completions to the same width: the update's arrays are global
            longest = hosts.max(int(np.max(out.lengths, initial=0)))
            batch = rollout_batch(out, np.zeros(out.tokens.shape[0], np.float32), setup.shapes, tok.pad_id,
                                  longest=longest)
            completions = out.completions()
            texts = [tok.decode(c) for c in completions]
            responses = [texts[b * g:(b + 1) * g] for b in range(len(records))]

        with timer.phase("judge"):  # the method's reward, with whatever judging it does
            res = checked(setup.method.reward(RewardBatch(records, prompts, responses, step, group_ids, bkey)),
                          setup.method.name, len(records), g)
            r_bg, rows["method"] = res.reward, res.rows
            drop = np.zeros(len(records), bool) if res.drop is None else np.asarray(res.drop, bool)

        with timer.phase("reward"):
            rows["judge_reward"] = r_bg
            r_bg = add_terms(setup, r_bg, TermBatch(records, batch, [e[0] for e in encoded], completions, g), rows)
            rows["reward"] = r_bg
            rows["completion"] = diagnostics.completion_rows(out, prompts, texts, tok)
            rows["truncated"] = np.asarray([e[1] for e in encoded], bool)
    dyn = setup.dynamic
    keep = dynamic.keep_groups(r_bg, dyn.min_spread, drop) if dyn.enabled else ~drop
    return SampledBatch(list(records), out, rows, np.asarray(r_bg, np.float32), keep, res.picked)


def sample_until_full(setup: Setup, step: int, key, timer: PhaseTimer) -> list[SampledBatch]:
    """The step's sampled batches: one, or under dynamic sampling `oversample` and then one more at a time while
    any process has fewer kept groups than its batch, at most `max_rounds` more (all processes agree)."""
    dyn = setup.dynamic
    first = dyn.oversample if dyn.enabled else 1
    unit = f"batches of {setup.config.prompts_per_step} x {setup.config.group_size} rollouts"
    batches = []
    for i in range(first):
        inner_progress.report("sample", i, first, unit)
        batches.append(sample_batch(setup, step, key, i, timer))
    need = len(batches[0].records)
    while dyn.enabled and len(batches) - dyn.oversample < dyn.max_rounds:
        if min(setup.hosts.gather(int(sum(b.keep.sum() for b in batches)))) >= need:
            break
        inner_progress.report("sample (refill)", len(batches), first + dyn.max_rounds, unit)
        batches.append(sample_batch(setup, step, key, len(batches), timer))
    return batches


def update_batch(setup: Setup, batches: list[SampledBatch], sel: dynamic.Selection) -> RolloutBatch:
    """The update's rows: the selected groups in order, at one completion width for all batches and processes;
    zero-weight (padding) groups get empty completion masks, so no loss term or denominator counts them."""
    g, pad = setup.config.group_size, setup.tokenizer.pad_id
    longest = setup.hosts.max(max(int(np.max(b.out.lengths, initial=0)) for b in batches))
    fitted = [rollout_batch(b.out, np.zeros(b.out.tokens.shape[0], np.float32), setup.shapes, pad, longest=longest)
              for b in batches]
    if len({f.prompt_len for f in fitted}) > 1:
        raise ValueError("batches of one step were padded to different prompt widths")
    tokens, mask, cmask, logp = (np.concatenate([getattr(fitted[bi], name)[gi * g:(gi + 1) * g] for bi, gi in sel.picks])
                                 for name in ("tokens_bt", "mask_bt", "completion_mask_bt", "sample_logp_bt"))
    weight = np.repeat(sel.weight, g) > 0
    return RolloutBatch(tokens_bt=tokens, mask_bt=mask, prompt_len=fitted[0].prompt_len,
                        completion_mask_bt=cmask & weight[:, None], adv_b=np.zeros(len(weight), np.float32),
                        sample_logp_bt=logp)


def train_step(setup: Setup, step: int, key, timer: PhaseTimer) -> dict[str, float]:
    """One step. This process samples, judges and rewards its slice of the prompts on its own devices (more
    batches under dynamic sampling, rubric_jax.rl.dynamic); the per-row results of all processes are pooled
    (`hosts.merged`) for advantages and metrics; the update runs on the global batch over the whole mesh."""
    cfg, hosts, method = setup.config, setup.hosts, setup.method
    # the method's schedule for the step (e.g. criterion weights), before its judge figures start counting
    pace = method.begin_step(step, key, timer)
    with JudgePadding(method.judge) as judge_pad:
        batches = sample_until_full(setup, step, key, timer)
    need = len(batches[0].records)
    if setup.dynamic.enabled:
        sel = dynamic.select_groups([b.keep for b in batches], need)
    else:  # no refill: the one batch as sampled, groups the method drops (RewardOut.drop) at zero weight
        sel = dynamic.Selection(tuple((0, i) for i in range(need)), batches[0].keep.astype(np.float32))
    batch = update_batch(setup, batches, sel)
    rows = merge_rows([b.rows for b in batches])
    rows["padding"] = padding_counts(SimpleNamespace(prompt_mask=np.concatenate([b.out.prompt_mask for b in batches])),
                                     batch)
    picked = {"reward": np.stack([batches[bi].reward[gi] for bi, gi in sel.picks]), "weight": sel.weight}
    for name in batches[0].picked:
        picked[name] = np.stack([batches[bi].picked[name][gi] for bi, gi in sel.picks])
    rows["picked"] = picked
    rows["dynamic"] = np.asarray([[sum(len(b.keep) for b in batches), sum(int(b.keep.sum()) for b in batches),
                                   len(batches) - (setup.dynamic.oversample if setup.dynamic.enabled else 1),
                                   sel.padded]], np.int64)

    with timer.phase("pool"):  # also where processes wait for the slowest one
        pooled = hosts.merged(rows)
        method.commit(pooled["method"])  # changes the method makes from every process' rows, in process order
        # Advantages from the global batch (a group never spans processes, but a batch-level
        # normalisation would): every process computes all of them and keeps its own rows.
        chosen = pooled["picked"]
        adv_all = np.asarray(advantages(jnp.asarray(chosen["reward"]), kind=cfg.loss.advantage))
        adv_all = adv_all * chosen["weight"][:, None]
        adv = adv_all[hosts.index * need:(hosts.index + 1) * need].reshape(-1)

    if chosen["weight"].any():
        with timer.phase("update"), hosts.global_context():
            umetrics = setup.policy.update(dataclasses.replace(batch, adv_b=adv.astype(np.float32)),
                                           jax.random.fold_in(key, 2))
    else:  # every group dropped (bound hit): no step at all, since AdamW's momentum would move weights on zeros
        log.warning("step %d: no group with a learning signal after %d batches: update skipped", step, len(batches))
        umetrics = {"dynamic/empty_update": 1.0}
    metrics = step_metrics(setup, pooled, adv_all, umetrics, judge_pad.metrics())
    metrics.update(pace)
    metrics.update(method.end_step(step, timer))  # what the method does once the step is done
    return metrics


def step_metrics(setup: Setup, pooled: dict[str, Any], adv_all: np.ndarray, umetrics: dict[str, float],
                 judge_time: dict[str, float]) -> dict[str, float]:
    """Every logged figure of a step, from the rows pooled over all processes (the same on each)."""
    r_bg = pooled["reward"]
    metrics: dict[str, float] = {**padding_metrics(pooled["padding"]), **judge_time}
    if setup.dynamic.enabled:
        sampled, kept, extra, padded = (int(x) for x in pooled["dynamic"].sum(axis=0))
        metrics.update(dynamic.dynamic_metrics(sampled, kept, pooled["dynamic"][:, 2].max(), padded,
                                               len(pooled["picked"]["weight"])))
    elif pooled["picked"]["weight"].min() == 0:
        metrics["dynamic/padded_groups"] = float(np.sum(pooled["picked"]["weight"] == 0))
    metrics.update(setup.method.metrics(pooled["method"], adv_all, pooled["picked"]))
    metrics["reward/judge_mean"] = float(pooled["judge_reward"].mean())
    for term in setup.terms:
        metrics[f"bonus/{term.name}"] = float(pooled[f"bonus_{term.name}"].mean())
    metrics.update(umetrics)
    metrics.update({
        "reward/mean": float(r_bg.mean()), "reward/std": float(r_bg.std(axis=1).mean()),
        "reward/zero_spread_groups": float(np.asarray(zero_spread_mask(jnp.asarray(r_bg))).mean()),
        "adv/abs_mean": float(np.abs(adv_all).mean()), "adv/max": float(adv_all.max()),
        "adv/min": float(adv_all.min()),
        "prompt_truncated": float(np.mean(pooled["truncated"])),
    })
    metrics.update(diagnostics.completion_metrics(pooled["completion"]))
    metrics.update(diagnostics.length_audit(pooled["completion"]["length"], pooled["judge_reward"]))
    return metrics


def add_terms(setup: Setup, r_bg, batch: TermBatch, rows: dict[str, Any]) -> np.ndarray:
    """Adds each reward term's weighted bonus (`Term.weighted`: rubric_jax.rl.plugins) to this process' rewards;
    the raw bonuses go to `rows` (bonus_<name>)."""
    for term in setup.terms:
        bonus = term.bonus(batch)
        rows[f"bonus_{term.name}"] = bonus
        r_bg = r_bg + term.weighted(bonus)
    return r_bg


def train(config, workdir: str) -> list[dict]:
    """Runs (or resumes) the job in `workdir`; returns the metrics of the steps run in this call. `config`: a
    `preflight.Checked` (what `python -m rubric_jax.main` hands down), or a ConfigDict, checked here once."""
    ready = preflight.check(config)
    config = ready.config
    os.makedirs(workdir, exist_ok=True)
    with contextlib.ExitStack() as stack:
        # One run per workdir, before anything is written there (process 0 holds it for all of a run's processes).
        if jax.process_index() == 0:
            stack.enter_context(WorkdirLock(workdir))
        # Before the model loads: a damaged newest checkpoint is set aside, a setting its arrays cannot follow is
        # named (workdir.ResumeError), and a run that already holds its last step stops here.
        done = check_resume(config, workdir)
        if done is not None and done >= config.steps:
            if jax.process_index() == 0:
                print(f"workdir {workdir} already holds step {done} >= total steps {config.steps}; nothing to do",
                      flush=True)
            return []
        # Before anything compiles: programs compiled by an earlier run in this workdir are loaded, not rebuilt
        # ('' = <workdir>/jax_cache unless JAX was given a directory; 'none' = off). Restored afterwards.
        stack.enter_context(compilation_cache(config.compilation_cache_dir, workdir))
        # SIGTERM / SIGINT from here on end the run with a checkpoint and one line (rubric_jax.rl.stopping).
        stops = stack.enter_context(StopSignals())
        return _train(ready, workdir, stops)


def _train(ready: preflight.Checked, workdir: str, stops: StopSignals) -> list[dict]:
    setup = build(ready)
    config = setup.config
    # Saves are asynchronous: the arrays are copied off the devices during the save phase and written while the
    # next step runs. orbax renames a checkpoint into place only once it is complete, so a kill mid-write leaves
    # the previous one restorable, and a new save (or the crash snapshot below) first waits for the last one.
    ckpt = Checkpointer(workdir, max_to_keep=config.checkpoint.keep, save_interval_steps=1, async_save=True)
    start = _restore(setup, ckpt)
    lines, slow = run_summary(setup)
    if setup.hosts.index == 0:
        for line in lines:
            print(line, flush=True)
        if slow:
            log.warning(slow)
        if start:
            print(f"resumed from step {start} ({ckpt.directory})", flush=True)
    writer = MetricsWriter(workdir, tensorboard=config.tensorboard, resume_step=start)  # process 0 only
    hosts = setup.hosts
    # Two processes on one host would write the same trace file names: the others trace under process_<i>/.
    trace_dir = workdir if hosts.index == 0 else os.path.join(workdir, f"process_{hosts.index}")
    if start == 0 and hosts.index == 0:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(config.to_json_best_effort(indent=2))
    progress = ConsoleProgress(config.steps, keys=("reward/mean", "reward/std", "loss", "kl", "entropy",
                                                   "completion_len/mean", "time/judge"))
    base_key = jax.random.key(config.seed)
    history, saved = [], start
    warned: set[str] = set()  # the collapse signs already warned about
    last_phases: dict[str, float] = {}  # seconds per phase in the previous step: the progress lines' ETAs
    step = start
    snapshot = _snapshot(setup)
    compiles = CompileCounter().start()  # per step: XLA programs built (setup's own are not counted)
    # SIGTERM / SIGINT: one process abandons the step in flight; several finish it and stop together at the
    # next boundary, since their save is collective (rubric_jax.rl.stopping).
    # (The handlers, installed by `train`, stay through the crash path: a signal during its save exits at once.)
    stops.immediate, stops.gather = not hosts.multi, hosts.gather if hosts.multi else None
    try:
        for step in range(start, config.steps):
            snapshot = _snapshot(setup)
            stops.boundary()
            ckpt.check()  # a background save that failed stops the run here, not after more unsaved steps
            timer = PhaseTimer()
            printer = inner_progress.StepPrinter(step, enabled=hosts.index == 0, expected=last_phases,
                                                 announce=bool(slow) and step == start)
            with maybe_profile(step, config.profile_steps, trace_dir, python=config.profile_python), \
                    inner_progress.reporting(printer):
                metrics = train_step(setup, step, jax.random.fold_in(base_key, step), timer)
            with stops.held():  # the step is done: it is saved and logged whole while a signal waits
                setup.entropy_head = diagnostics.record_entropy(setup.entropy_head, step,
                                                                metrics.get("policy_entropy"))
                h0 = diagnostics.initial_entropy(setup.entropy_head)
                if h0 is not None:  # RcRL Figure 9: entropy relative to the run's first steps
                    metrics["policy_entropy_ratio"] = diagnostics.entropy_ratio(metrics["policy_entropy"], h0)
                done = step + 1
                if done % config.checkpoint.every == 0 or done == config.steps:
                    with timer.phase("save"):
                        ckpt.save(done, _train_state(setup.policy),
                                  _meta(setup, done, setup.data_iter.get_state()), force=True)
                        saved = done
                        setup.method.on_save(workdir)  # the method's files beside the checkpoints
                metrics.update(timer.metrics())
                metrics["time/step"] = sum(timer.metrics().values())
                last_phases = {k.removeprefix("time/"): v for k, v in timer.metrics().items()}
                metrics.update(compiles.metrics())  # time/compiles, time/compile_cache_hits, time/compile_secs
                writer.write_scalars(step, metrics)
                texts = setup.method.texts()  # the method's events of the step, for texts.jsonl
                if texts:
                    writer.write_texts(step, texts)
                progress.update(step, metrics)
                history.append({"step": step, **metrics})
                for sign in diagnostics.collapse_signs(history, setup.base.cfg.vocab_size, h0):
                    if sign.split(" ")[0] not in warned:  # once per kind: the metrics carry it every step
                        warned.add(sign.split(" ")[0])
                        log.warning("step %d: the run looks collapsed: %s (optim.lr is %g)", step, sign,
                                    config.optim.lr)
        ckpt.wait()  # the last save's failure is the run's
    except BaseException as e:
        stops.stopping()  # a signal from here on exits at once, leaving the newest complete checkpoint as it is
        # The interrupted step never finished: keep the state from before it (nothing lost on a crash).
        # With several processes a save is collective and the others may not be here: rely on the
        # periodic checkpoints (checkpoint.every) instead of hanging; a stop is agreed by all, so all save.
        stopped = isinstance(e, Stopped)
        if isinstance(e, SaveFailedError):  # the disk refuses: no crash save, say which checkpoint is whole
            raise SaveFailedError(e.step, e.why, e.directory, f"step {step}: {e}; {_intact_line(ckpt)}; make room "
                                  f"or fix the folder, then rerun the same command to resume") from None
        if step > saved and hosts.multi and not stopped:
            log.warning("process %d interrupted in step %d: not saving (multi-process runs resume from the "
                        "last periodic checkpoint, step %d)", hosts.index, step, saved)
        elif step > saved:
            if not stopped:
                log.warning("run interrupted in step %d: saving the state after step %d", step, step - 1)
            trainable, opt_state, data_state, method_snapshot = snapshot
            try:
                ckpt.save(step, _state_dict(setup.policy.finetune, trainable, opt_state),
                          _meta(setup, step, data_state, method_snapshot), force=True)
                ckpt.wait()
                saved = step
            except SaveFailedError as failed:  # the error that stopped the run is the one to report
                log.warning("the state after step %d could not be saved (%s); %s", step - 1, failed.why,
                            _intact_line(ckpt))
        if stopped:
            e.step, e.saved, e.checkpoints = step, saved, ckpt.directory
            e.finished_step = e.finished_step or saved > step
        if isinstance(e, NonFiniteError):  # rejected updates kept the weights finite: say which step they are
            good = step - setup.policy.bad_steps
            kept = f"step {good} was the last whose update was kept" if good >= 0 else "no update was ever kept"
            raise NonFiniteError(f"step {step}: {e}; {kept}, and checkpoint {saved} ({ckpt.directory}) holds those "
                                 f"finite weights; lower optim.lr (now {config.optim.lr:g}) or optim.max_grad_norm "
                                 f"before resuming") from None
        raise
    finally:
        compiles.stop()
        ckpt.close()
        writer.close()
    return history


def _intact_line(ckpt: Checkpointer) -> str:
    try:
        last = ckpt.latest_step()
    except Exception as e:  # the folder itself unreadable: say so rather than hide the first error
        return f"the checkpoints cannot be listed ({e})"
    return f"the last intact checkpoint is step {last} ({ckpt.directory})" if last is not None else \
        f"no checkpoint was completed in {ckpt.directory}"


def _snapshot(setup: Setup):
    """The state between steps (arrays and rubrics are immutable, so this copies no data)."""
    return setup.policy.trainable, setup.policy.opt_state, setup.data_iter.get_state(), setup.method.snapshot()


_CURRENT = object()


def _meta(setup: Setup, done: int, data_state: dict, method_snapshot=_CURRENT) -> dict:
    """The checkpoint's JSON dict ("judge": which model rewarded the steps); each feature adds its own keys:
    the method's state (`Method.state`: docs/architecture.md lists each method's keys), the reward terms'
    (`Term.state`), full fine-tuning's "finetune", "entropy_head" (the first steps' entropy) and "run" (the prompt file and the settings
    the arrays' shapes depend on, workdir.run_record).
    `method_snapshot`: the method's snapshot from before an interrupted step (default its current state)."""
    meta = {"step": done, "data": data_state, "skipped_updates": setup.policy.total_bad_steps,
            "judge": judge_record(setup),
            "run": run_record(setup.config)}  # what a resume must keep (workdir.check_resume, check_prompts)
    method = setup.method
    meta.update(method.state() if method_snapshot is _CURRENT else method.state(method_snapshot))
    for term in setup.terms:
        meta.update(term.state())
    if setup.entropy_head:
        meta["entropy_head"] = setup.entropy_head  # [{"step": s, "policy_entropy": v}] of the first steps
    if setup.policy.finetune != "lora":  # LoRA checkpoints keep the meta they always had
        meta["finetune"] = setup.policy.finetune
    return meta
