"""The training loop end to end: every experiment config runs, resume equals an uninterrupted run, and the
README's main command trains on the embedded SmolLM2 and resumes."""

import glob
import importlib.util
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from rubric_jax.rl import trainer
from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py")))
TABLE3 = {"rcrl", "absolute_rar", "pairwise_rar", "dropout_rar", "absolute_rcrl", "weighting", "orderings",
          "rcrl_kl", "rcrl_exploration", "rcrl_usefulness", "health_rcrl"}


def load_config(name, arg=None):
    spec = importlib.util.spec_from_file_location(f"cfg_{name}", os.path.join(ROOT, "configs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


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
    assert (rcrl.optim.lr, rcrl.optim.warmup_steps, rcrl.prompts_per_step, rcrl.group_size) == (5e-6, 50, 8, 8)
    assert (rcrl.sampling.top_p, rcrl.sampling.top_k, rcrl.loss.aggregation, rcrl.steps) == (0.8, 20, "dr_grpo", 1300)
    assert load_config("health_rcrl").reward.interval == 50


def _tiny_run_config(name, ckpt_dir, **over):
    c = load_config(name, "tiny")
    c.model = ckpt_dir
    c.steps = over.pop("steps", 1)
    c.max_completion_len = 8
    c.tensorboard = False
    for k, v in over.items():
        obj = c
        *path, leaf = k.split(".")
        for p in path:
            obj = obj[p]
        obj[leaf] = v
    return c


@pytest.mark.parametrize("name", sorted(TABLE3))
def test_every_config_runs_a_step(name, tiny_qwen3, tmp_path):
    hist = trainer.train(_tiny_run_config(name, tiny_qwen3[0]), str(tmp_path))
    m = hist[-1]
    assert np.isfinite(m["loss"]) and m["active_criteria"] >= 1
    if load_config(name).reward.judging == "pairwise":
        assert m["reward/judge_mean"] == pytest.approx(0.5, abs=1e-5)  # win rates average 1/2 in every group
    if "exploration" in name or "usefulness" in name:
        assert "bonus/exploration" in m
    if "usefulness" in name:
        assert "bonus/usefulness" in m
    if name == "rcrl_kl":
        assert m["kl"] >= 0
    assert Checkpointer(str(tmp_path)).latest_step() == 1


def _final_lora(workdir):
    ck = Checkpointer(workdir)
    state, meta = ck.restore()
    ck.close()
    return [np.asarray(x) for x in jax.tree.leaves(state["lora"])], meta


def test_resume_after_a_crash_equals_an_uninterrupted_run(tiny_qwen3, tmp_path, monkeypatch):
    straight, resumed = str(tmp_path / "a"), str(tmp_path / "b")
    # Saving every 2 steps: the crash in step 3 must itself save the state after step 2.
    cfg = lambda steps: _tiny_run_config("rcrl", tiny_qwen3[0], steps=steps, **{"checkpoint.every": 2})
    trainer.train(cfg(6), straight)

    real_step = trainer.train_step

    def crash_at_3(setup, step, key, timer):
        if step == 3:
            raise KeyboardInterrupt("killed")
        return real_step(setup, step, key, timer)

    # The same command (same schedule over 6 steps), killed inside step 3, then restarted.
    monkeypatch.setattr(trainer, "train_step", crash_at_3)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(cfg(6), resumed)
    assert Checkpointer(resumed).latest_step() == 3  # the state after step 2 was kept
    monkeypatch.setattr(trainer, "train_step", real_step)
    trainer.train(cfg(6), resumed)

    a, meta_a = _final_lora(straight)
    b, meta_b = _final_lora(resumed)
    assert meta_a["data"] == meta_b["data"] and meta_b["step"] == 6
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-6)
    ma, mb = read_metrics(straight), read_metrics(resumed)
    assert [m["step"] for m in mb] == list(range(6))  # no duplicated or missing steps
    for x, y in zip(ma, mb):
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], abs=1e-5), (x["step"], k)


def test_main_trains_the_embedded_model_and_resumes(tmp_path):
    """The README's first command (tiny variant), then the same command with more steps resumes."""
    wd = str(tmp_path / "run")
    cmd = [sys.executable, "-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny", f"--workdir={wd}"]
    # The restart reuses the first run's compiled programs through JAX's persistent compilation cache.
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "step 1/2" in p.stdout  # progress counts steps from 0
    assert [m["step"] for m in read_metrics(wd)] == [0, 1]
    assert Checkpointer(wd).latest_step() == 2
    assert glob.glob(os.path.join(wd, "tb", "events.out.tfevents.*"))
    p = subprocess.run(cmd + ["--config.steps=3"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [m["step"] for m in read_metrics(wd)] == [0, 1, 2]
    assert Checkpointer(wd).latest_step() == 3
    # A typo in an override is an error, not a silent no-op.
    p = subprocess.run(cmd + ["--config.stpes=3"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode != 0 and "stpes" in p.stderr
