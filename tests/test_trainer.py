"""The training loop end to end: every experiment config runs a step and resume equals an uninterrupted run.
(The README's main command on SmolLM2 is test_main_job.py; the RARE family's configs, test_rare_configs.py:
separate files, so the two test workers share the long runs.)"""

import glob
import os

import jax
import numpy as np
import pytest

from rubric_jax.methods import per_prompt
from rubric_jax.rl.plugins import term_keys
from rubric_jax.rl import trainer
from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.metrics import read_metrics
from rubric_jax.methods.rcrl.reward import ordered_criteria, reward_config, step_weights
from rubric_jax.rubrics import load_rubric

from conftest import load_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py")))
TABLE3 = {"rcrl", "absolute_rar", "pairwise_rar", "dropout_rar", "absolute_rcrl", "weighting", "orderings",
          "rcrl_kl", "rcrl_exploration", "rcrl_usefulness", "health_rcrl"}




# The criterion schedule each Table 3 row locks in, written out by hand from the paper's settings:
# (rubric, schedule, interval, weighting, alpha, order seed (None = the rubric's own order), dropout q).
SCHEDULES = {
    "rcrl": ("creative_writing", "curriculum", 100, "emphasis", 0.5, None, 0.0),
    "absolute_rcrl": ("creative_writing", "curriculum", 100, "emphasis", 0.5, None, 0.0),
    "rcrl_kl": ("creative_writing", "curriculum", 100, "emphasis", 0.5, None, 0.0),
    "rcrl_exploration": ("creative_writing", "curriculum", 100, "emphasis", 0.5, None, 0.0),
    "rcrl_usefulness": ("creative_writing", "curriculum", 100, "emphasis", 0.5, None, 0.0),
    "health_rcrl": ("health", "curriculum", 50, "emphasis", 0.5, None, 0.0),
    "weighting": ("creative_writing", "curriculum", 100, "equal", 0.5, None, 0.0),
    "orderings": ("creative_writing", "curriculum", 100, "emphasis", 0.5, 1, 0.0),
    "absolute_rar": ("creative_writing", "all", 100, "equal", 0.5, None, 0.0),
    "pairwise_rar": ("creative_writing", "all", 100, "equal", 0.5, None, 0.0),
    "dropout_rar": ("creative_writing", "dropout", 100, "equal", 0.5, None, 0.5),
}


def _curriculum_ids(name):
    """The rubric's criterion ids in the config's curriculum order (seeded permutation for the Orderings row)."""
    rubric, _, _, _, _, seed, _ = SCHEDULES[name]
    ids = [c.id for c in load_rubric(rubric).criteria]
    if seed is not None:
        ids = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]
    return ids


def _expected_weights(name, step, interval):
    """{criterion id: lambda} of the active criteria at `step`, by hand (not through rubric_jax.rewards)."""
    _, kind, _, weighting, alpha, _, _ = SCHEDULES[name]
    ids = _curriculum_ids(name)
    if kind == "all":
        return {i: 1 / len(ids) for i in ids}
    assert kind == "curriculum"
    k = min(len(ids), 1 + step // interval)
    if k == 1:
        return {ids[0]: 1.0}
    if weighting == "equal":
        return {i: 1 / k for i in ids[:k]}
    return {**{i: (1 - alpha) / (k - 1) for i in ids[:k - 1]}, ids[k - 1]: alpha}


def _step_key(config, step):
    """The key the trainer draws step `step`'s criterion dropout from (rubric_jax.rl.trainer.train_step)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), step), 1)


def _weights_by_id(config, step):
    rc = reward_config(config, term_keys())
    crit = ordered_criteria(load_rubric(config.rubric), rc)
    w = step_weights(step, len(crit), rc, _step_key(config, step))
    return {c.id: float(x) for c, x in zip(crit, w) if x > 0}, [c.id for c in crit]


@pytest.mark.parametrize("name", sorted(TABLE3))
def test_every_config_schedules_its_criteria(name):
    """Active criteria and their weights at several steps, for the full config and its tiny variant."""
    rubric, kind, interval, weighting, alpha, seed, q = SCHEDULES[name]
    full, tiny = load_config(name), load_config(name, "tiny")
    r = full.reward
    assert (full.rubric, r.interval, r.weighting, r.alpha, r.dropout_q) == (rubric, interval, weighting, alpha, q)
    assert r.curriculum == (kind == "curriculum") and r.order == ("paper" if seed is None else "random")
    if seed is not None:
        assert r.order_seed == seed
    assert tiny.reward.interval == 1  # the smoke run meets a new criterion every step
    for cfg, steps in ((full, (0, interval - 1, interval, 2 * interval + interval // 2, 12 * interval, 10**5)),
                       (tiny, (0, 1, 2, 5, 12, 40))):
        for step in steps:
            got, order = _weights_by_id(cfg, step)
            if seed is not None:
                assert order == _curriculum_ids(name) != [c.id for c in load_rubric(rubric).criteria]
            if kind == "dropout":
                assert 1 <= len(got) <= len(order)
                assert all(w == pytest.approx(1 / len(got), abs=1e-6) for w in got.values())
                continue
            want = _expected_weights(name, step, cfg.reward.interval)
            assert set(got) == set(want), (step, sorted(got), sorted(want))
            for cid, w in want.items():
                assert got[cid] == pytest.approx(w, abs=1e-6), (step, cid)
    if kind == "dropout":
        # Each criterion is kept with probability 1 - q, independently per step: the objective moves.
        masks = [frozenset(_weights_by_id(full, step)[0]) for step in range(200)]
        kept = sum(len(m) for m in masks) / (200 * 13)
        assert abs(kept - (1 - q)) < 0.05, kept
        assert len(set(masks)) > 150


def test_every_table3_row_has_a_locked_config_with_a_tiny_variant():
    assert TABLE3 <= set(CONFIGS)
    for name in CONFIGS:
        full, tiny = load_config(name), load_config(name, "tiny")
        assert full.steps > tiny.steps and tiny.model == "smollm2-135m-instruct"
        with pytest.raises(AttributeError):
            full.stpes = 3
        doc = open(os.path.join(ROOT, "configs", f"{name}.py")).read()
        assert f"--config=configs/{name}.py" in doc  # the launch command is documented
    rcrl = load_config("rcrl")
    assert (rcrl.lora.rank, rcrl.lora.alpha, rcrl.lora.dropout) == (32, 32.0, 0.05)
    assert (rcrl.optim.lr, rcrl.optim.warmup_steps, rcrl.group_size, rcrl.sampling.temperature) == (5e-6, 50, 8, 0.7)
    assert (rcrl.sampling.top_p, rcrl.sampling.top_k, rcrl.loss.aggregation, rcrl.steps) == (0.8, 20, "dr_grpo", 1300)
    assert load_config("health_rcrl").reward.interval == 50


def _tiny_run_config(name, ckpt_dir, **over):
    c = load_config(name, "tiny")
    c.model = ckpt_dir
    c.steps = over.pop("steps", 1)
    c.max_completion_len = 8
    # every dataset at the same prompt width: the tiny runs of the suite share sampler and update programs
    # through the session's compilation cache (tests/conftest.py) instead of compiling them per dataset
    c.prompt_width = "max"
    c.tensorboard = False
    # a random model's integer scores are unreadable, so RARE's scorer retries nearly every one in generate
    # mode: 16 tokens instead of 64 run the same retry path at a quarter of the decoding (the 152k-word output
    # layer dominates each decoding step of the tiny model)
    c.rare.retry_max_new_tokens = 16
    for k, v in over.items():
        obj = c
        *path, leaf = k.split(".")
        for p in path:
            obj = obj[p]
        obj[leaf] = v
    return c


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TABLE3))
def test_every_config_runs_a_step(name, tiny_qwen3, tmp_path):
    """The tiny variant trains; every step logs the criteria and weights its schedule gives (interval 1: a curriculum
    adds one per step, so 3 steps reach K=3, where emphasis and equal weighting differ; dropout draws a new subset
    each step; all-active rows judge all 13 from step 0)."""
    kind = SCHEDULES[name][1]
    steps = {"curriculum": 3, "dropout": 2, "all": 1}[kind]
    cfg = _tiny_run_config(name, tiny_qwen3[0], steps=steps)
    hist = trainer.train(cfg, str(tmp_path))
    assert [m["step"] for m in hist] == list(range(steps))
    for m in hist:
        if kind == "dropout":
            want = _weights_by_id(cfg, m["step"])[0]  # the subset drawn from the trainer's key of this step
        else:
            want = _expected_weights(name, m["step"], cfg.reward.interval)
        logged = {k[len("weight/"):]: v for k, v in m.items() if k.startswith("weight/")}
        assert m["active_criteria"] == len(want), (m["step"], m["active_criteria"], sorted(want))
        assert logged == pytest.approx(want, abs=1e-6), m["step"]
    if kind == "dropout":  # a new subset each step (seeded: the first two draws differ)
        assert {k for k in hist[0] if k.startswith("weight/")} != {k for k in hist[1] if k.startswith("weight/")}
    m = hist[-1]
    assert np.isfinite(m["loss"])
    if load_config(name).reward.method == "pairwise":
        assert m["reward/judge_mean"] == pytest.approx(0.5, abs=1e-5)  # win rates average 1/2 in every group
    if "exploration" in name or "usefulness" in name:
        assert "bonus/exploration" in m
    if "usefulness" in name:
        assert "bonus/usefulness" in m
    if name == "rcrl_kl":
        assert m["kl"] >= 0
    assert Checkpointer(str(tmp_path)).latest_step() == steps


@pytest.mark.slow
def test_listwise_judging_trains_a_curriculum(tiny_qwen3, tmp_path):
    """configs/rcrl_listwise.py: the reward phase judges each group listwise (its health figures are logged),
    win rates still average 1/2 per group, and the curriculum's second criterion arrives at step 1."""
    cfg = _tiny_run_config("rcrl_listwise", tiny_qwen3[0], steps=2)
    hist = trainer.train(cfg, str(tmp_path))
    assert [m["active_criteria"] for m in hist] == [1, 2]
    for m in hist:
        assert m["reward/judge_mean"] == pytest.approx(0.5, abs=1e-5)
        assert 0.0 <= m["judge/top_agreement"] <= 1.0 and "judge/position_spread" in m
        assert "judge/order_agreement" not in m  # a pairwise figure: the pair path did not run
    assert np.isfinite(hist[-1]["loss"])


def kill_then_resume(monkeypatch, run, step: int, check=lambda: True, signum: int | None = None):
    """Runs `run()` with the training step `step` interrupted, checks `check()`, then runs it again unharmed:
    the restart resumes from what the interrupted run saved. The interruption is an exception raised inside
    the step (KeyboardInterrupt, as a crash would), or with `signum` that signal sent to this process mid-step
    (the run's own handler turns it into rubric_jax.rl.stopping.Stopped); returns (the restart's history, the
    exception)."""
    import signal as _signal

    from rubric_jax.rl.stopping import Stopped

    real_step = trainer.train_step

    def crash(setup, s, key, timer):
        if s == step:
            if signum is None:
                raise KeyboardInterrupt("killed")
            os.kill(os.getpid(), signum)  # the handler raises here, inside the step
            raise AssertionError(f"{_signal.Signals(signum).name} did not stop the step")
        return real_step(setup, s, key, timer)

    monkeypatch.setattr(trainer, "train_step", crash)
    with pytest.raises(KeyboardInterrupt if signum is None else Stopped) as e:
        run()
    assert check()
    monkeypatch.setattr(trainer, "train_step", real_step)
    return run(), e.value


def _final_lora(workdir):
    ck = Checkpointer(workdir)
    state, meta = ck.restore()
    ck.close()
    return [np.asarray(x) for x in jax.tree.leaves(state["lora"])], meta


def _straight_config(model, steps=6):
    return _tiny_run_config("rcrl", model, steps=steps, **{"checkpoint.every": 2})


@pytest.fixture(scope="module")
def straight_run(tiny_qwen3, tmp_path_factory):
    """Six uninterrupted steps of the tiny RcRL run, saving every 2: what every interrupted-and-resumed run of
    this module must equal. Returns the workdir."""
    wd = str(tmp_path_factory.mktemp("straight"))
    trainer.train(_straight_config(tiny_qwen3[0]), wd)
    return wd


def _assert_equal_runs(straight, resumed, steps=6):
    a, meta_a = _final_lora(straight)
    b, meta_b = _final_lora(resumed)
    assert meta_a["data"] == meta_b["data"] and meta_b["step"] == steps
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-6)
    ma, mb = read_metrics(straight), read_metrics(resumed)
    assert [m["step"] for m in mb] == list(range(steps))  # no duplicated or missing steps
    for x, y in zip(ma, mb):
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], abs=1e-5), (x["step"], k)


@pytest.mark.slow
def test_resume_after_a_crash_equals_an_uninterrupted_run(straight_run, tiny_qwen3, tmp_path, monkeypatch):
    """Ctrl-C inside step 3 (a real SIGINT to this process): the run abandons the step, saves the state after
    step 2 (checkpoints are every 2 steps, so this save is the stop's own), says so in its exception, and the
    same command resumes to a run equal to an uninterrupted one."""
    import signal

    resumed = str(tmp_path / "b")
    _, stop = kill_then_resume(monkeypatch, lambda: trainer.train(_straight_config(tiny_qwen3[0]), resumed), 3,
                               check=lambda: Checkpointer(resumed).latest_step() == 3, signum=signal.SIGINT)
    assert (stop.exit_code, stop.step, stop.saved, stop.finished_step) == (130, 3, 3, False)
    assert stop.line("CMD").startswith("stopped by SIGINT in step 3, which was abandoned")
    assert stop.line("CMD").endswith("resume with: CMD") and "checkpoint 3 (" in stop.line("CMD")
    _assert_equal_runs(straight_run, resumed)


@pytest.mark.slow
def test_sigterm_saves_says_one_line_and_the_same_command_resumes(straight_run, tiny_qwen3, tmp_path):
    """A scheduler's preemption at the command line: SIGTERM during the run exits 143 with one line naming the
    checkpoint and the command that resumes, no traceback; that command (run here in-process) finishes a run
    equal to an uninterrupted one. Where in the step the signal lands is up to the scheduler, so the line may
    say abandoned or finished; both must resume exactly. One subprocess (~15 s: JAX's start, programs from the
    session's compilation cache)."""
    import signal
    import subprocess
    import sys
    import time

    wd = str(tmp_path / "run")
    cfg = _straight_config(tiny_qwen3[0])
    over = {"model": tiny_qwen3[0], "steps": 6, "max_completion_len": 8, "prompt_width": "max", "tensorboard": False,
            "rare.retry_max_new_tokens": 16, "checkpoint.every": 2}
    cmd = [sys.executable, "-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny", f"--workdir={wd}",
           *(f"--config.{k}={v}" for k, v in over.items())]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        for line in p.stdout:  # the first step's metrics line: the run is in its second step
            if line.startswith("step 0"):
                break
        # A second into step 1 (its sampling or judging): stops landing there crashed the interpreter's
        # teardown (exit -11) in about half the tries before main.py skipped it
        time.sleep(1.0)
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    took = time.monotonic() - sent
    said = [x for x in err.splitlines() if x.startswith("stopped by SIGTERM")]
    assert p.returncode == 143, err[-3000:]
    assert len(said) == 1 and "Traceback" not in err, err[-3000:]
    assert said[0].endswith("resume with: " + " ".join(["python", "-m", "rubric_jax.main"] + cmd[3:]))
    saved = Checkpointer(wd).latest_step()
    assert f"checkpoint {saved} (" in said[0] and 1 <= saved < 6
    assert [m["step"] for m in read_metrics(wd)] == list(range(saved))  # every finished step logged, once
    assert took < 60
    trainer.train(cfg, wd)
    _assert_equal_runs(straight_run, wd)


def _all_checkpoints_finite(workdir):
    ck = Checkpointer(workdir)
    try:
        steps = ck.all_steps()
        return steps, all(np.isfinite(np.asarray(x)).all() for s in steps
                          for x in jax.tree.leaves(ck.restore(s)[0]["lora"]))
    finally:
        ck.close()


@pytest.mark.slow
def test_an_overflowing_learning_rate_stops_naming_the_last_good_step_and_saves_only_finite_weights(tiny_qwen3,
                                                                                                    tmp_path):
    """optim.lr = 1e30: the updates that overflow are rejected (weights and optimizer state untouched), the run
    stops after loss.max_bad_steps of them with one message naming the last step whose update was kept, and
    every checkpoint it leaves is finite, so a rerun never resumes from garbage."""
    wd = str(tmp_path / "run")
    cfg = _straight_config(tiny_qwen3[0], steps=8)
    cfg.optim.lr, cfg.optim.warmup_steps, cfg.loss.max_bad_steps = 1e30, 0, 2
    cfg.checkpoint.every = 1
    with pytest.raises(trainer.NonFiniteError) as e:
        trainer.train(cfg, wd)
    msg = str(e.value)
    stopped = int(msg.split(":")[0].removeprefix("step "))
    assert f"step {stopped - 2} was the last whose update was kept" in msg, msg
    assert "2 consecutive updates rejected as non-finite" in msg and "lower optim.lr (now 1e+30)" in msg
    steps, finite = _all_checkpoints_finite(wd)
    assert steps and max(steps) == stopped and finite
    rows = read_metrics(wd)
    assert [r["step"] for r in rows] == list(range(stopped)) and rows[-1]["skipped_updates"] == 1


@pytest.mark.slow
def test_a_resume_onto_non_finite_weights_is_refused_by_name(straight_run, tiny_qwen3, tmp_path):
    """A checkpoint with a NaN in one adapter matrix (written by an older version, or by hand) is refused before
    training on it, and the message names that matrix."""
    import shutil

    wd = str(tmp_path / "run")
    shutil.copytree(straight_run, wd)
    ck = Checkpointer(wd)
    state, meta = ck.restore(6)
    first = jax.tree_util.tree_leaves_with_path(state["lora"])[0]
    state["lora"] = jax.tree_util.tree_map_with_path(lambda p, x: x * np.nan if p == first[0] else x, state["lora"])
    ck.save(7, state, {**meta, "step": 7}, force=True)
    ck.wait()
    ck.close()
    with pytest.raises(trainer.NonFiniteError, match=r"checkpoint 7 in .* holds non-finite weights \(\[") as e:
        trainer.train(_straight_config(tiny_qwen3[0], steps=8), wd)
    # the restored tree reaches the array through an attribute where the saved dict had a key: compare the names
    names = [str(getattr(k, "key", getattr(k, "name", k))) for k in first[0]]
    assert all(f"{n}" in str(e.value) for n in names) and "lora" in names[-2] + names[-1], (names, str(e.value))


@pytest.mark.slow
def test_a_failed_save_stops_the_run_at_the_next_boundary_in_one_line(straight_run, tiny_qwen3, tmp_path):
    """A checkpoint the disk refuses fails in orbax's background thread. A file-size limit refuses it here the way
    a quota does (EFBIG; a full disk gives ENOSPC through the same path): it lets metrics.jsonl grow and stops the
    checkpoint's files. The run stops at the next step boundary with one message naming the step, the
    OS error and the last intact checkpoint, leaves no checkpointing thread alive, and once the disk takes writes
    again the same command resumes from that checkpoint with no step lost or repeated."""
    import json
    import resource
    import shutil
    import threading

    wd = str(tmp_path / "run")
    shutil.copytree(straight_run, wd)
    cfg = _straight_config(tiny_qwen3[0], steps=8)
    cfg.checkpoint.every = 1
    # RLIMIT_FSIZE caps every file the process writes: it must let metrics.jsonl take two more rows (~2.5 KB
    # each) and refuse every checkpoint. Its data files vary in size and count (OCDBT splits the arrays over
    # one to three files, some under 26 KB: CI once saw checkpoint 7 fit), but each save writes a _METADATA
    # of about 20 KB, so the copied rows are cut to their step numbers and the cap set under that file's size.
    metrics = os.path.join(wd, "metrics.jsonl")
    with open(metrics) as f:
        steps = [json.loads(line)["step"] for line in f if line.strip()]
    with open(metrics, "w") as f:
        f.writelines(json.dumps({"step": s}) + "\n" for s in steps)
    limit = os.path.getsize(metrics) + 8_000  # room for the rows of steps 6 and 7
    smallest = min(os.path.getsize(os.path.join(wd, "checkpoints", str(s), "state", "_METADATA")) for s in (2, 4, 6))
    assert limit < smallest, (limit, smallest)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))  # Python ignores SIGXFSZ: writes fail with EFBIG
    try:
        with pytest.raises(trainer.SaveFailedError) as e:
            trainer.train(cfg, wd)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    msg = str(e.value)
    assert msg.startswith("step 7: saving checkpoint 7 failed ([Errno 27] File too large);"), msg
    assert "the last intact checkpoint is step 6" in msg and "\n" not in msg, msg
    alive = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    assert not alive, alive  # nothing keeps the process from exiting
    assert Checkpointer(wd, read_only=True).all_steps() == [2, 4, 6]
    trainer.train(cfg, wd)  # the disk takes writes again: the same run resumes from step 6
    assert [r["step"] for r in read_metrics(wd)] == list(range(8))


@pytest.mark.slow
def test_per_prompt_rubrics_judge_each_group_against_its_own(tiny_qwen3, tmp_path, monkeypatch):
    """rubric_source=record: every group is judged against its record's rubric (equal weights), and the
    reward equals the absolute reward recomputed from those scores by hand."""
    import json

    from rubric_jax.methods.rcrl import reward as reward_mod
    from rubric_jax.rubrics import Criterion, Rubric

    data = tmp_path / "data.jsonl"
    rubrics = [Rubric(f"r{q}", tuple(Criterion(f"c{k}", f"C{k}", f"check {q}.{k}", ("no", "yes"), max_points=k + 1,
                                               scoring="binary") for k in range(q + 2))) for q in range(2)]
    with open(data, "w") as f:
        for q, rub in enumerate(rubrics):
            f.write(json.dumps({"id": f"q{q}", "prompt": f"Say something about {q}.", "rubric": rub.to_dict()}) + "\n")
    seen = []
    real = reward_mod.judge_rewards_per_prompt

    def spy(judge, prompts, responses, rubs, cfg, **kw):
        r, rows = real(judge, prompts, responses, rubs, cfg, **kw)
        res = judge.pointwise_batch(list(prompts), [list(x) for x in responses], [list(x.criteria) for x in rubs])
        seen.append((list(prompts), [x.name for x in rubs], r, res))
        return r, rows

    monkeypatch.setattr(per_prompt, "judge_rewards_per_prompt", spy)
    cfg = _tiny_run_config("instance_rubric", tiny_qwen3[0], steps=1, **{"data.path": str(data)})
    hist = trainer.train(cfg, str(tmp_path / "run"))
    prompts, names, r, res = seen[0]
    assert sorted(names) == ["r0", "r1"]
    for p, name, rb, pr in zip(prompts, names, r, res):
        assert name == f"r{p.split()[-1][0]}"  # the rubric of that very record
        x = pr.scores / pr.max_points  # by hand: equal weights over the record's criteria, all valid
        assert pr.valid.all()
        np.testing.assert_allclose(rb, x.mean(axis=1), atol=1e-6)
    assert hist[0]["active_criteria"] == pytest.approx(2.5)
