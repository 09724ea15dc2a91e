"""The README's main command: `python -m rubric_jax.main --config=configs/rcrl.py:tiny` trains the embedded
SmolLM2, and the same command with more steps resumes it."""

import glob
import os
import subprocess
import sys

import pytest

from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.metrics import read_metrics

XLA_OPTIMIZED = True  # the real SmolLM2 trains in it (conftest._xla_optimisation)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_main_trains_the_embedded_model_and_resumes_past_a_damaged_checkpoint(trained_workdir, tmp_path):
    """The README's first command (tiny variant; the session's shared run, conftest.trained_workdir), then the
    same command with more steps on a copy whose checkpoint 2 lost half an array file: the resume sets it aside
    with one warning line, restores checkpoint 1, runs step 1 again, logging what the uninterrupted run logged,
    and saves checkpoint 2 anew. About 45 s on 2 cores: a real SmolLM2 step (programs from the shared cache)."""
    import json
    import shutil

    from conftest import README_TRAIN

    wd, out = trained_workdir.path, trained_workdir.stdout
    assert "step 1/2" in out  # progress counts steps from 0
    # the start says what runs where and how much work a step is, before the first step's line
    assert out.index("backend cpu") < out.index("step 1/2")
    assert "model smollm2-135m-instruct: 134.5M parameters" in out
    assert "2 prompt(s) x 2 rollouts = 4 completions" in out and "resumed" not in out
    assert [m["step"] for m in read_metrics(wd)] == [0, 1]
    assert Checkpointer(wd).latest_step() == 2
    assert glob.glob(os.path.join(wd, "tb", "events.out.tfevents.*"))
    # The restart reuses the first run's compiled programs through JAX's persistent compilation cache: by
    # default <workdir>/jax_cache, or the directory the environment gives JAX (a shared test cache).
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cache = env.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(wd, "jax_cache")
    assert os.listdir(cache)
    resumed = str(tmp_path / "run")
    shutil.copytree(wd, resumed)
    cmd = [sys.executable, *README_TRAIN, f"--workdir={resumed}"]
    # A typo in an override is an error, not a silent no-op (and fails before anything loads).
    p = subprocess.run(cmd + ["--config.stpes=3"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode != 0 and "stpes" in p.stderr
    # what a full disk or an interrupted copy leaves: checkpoint 2's largest array file cut to half
    data = os.path.join(resumed, "checkpoints", "2", "state", "ocdbt.process_0", "d")
    largest = max((os.path.join(data, f) for f in os.listdir(data)), key=os.path.getsize)
    os.truncate(largest, os.path.getsize(largest) // 2)
    p = subprocess.run(cmd + ["--config.steps=2"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    [line] = [ln for ln in p.stderr.splitlines() if "checkpoint step 2" in ln]
    assert "OUT_OF_RANGE" in line and "using step 1" in line
    assert "Traceback" not in p.stderr and "TensorStore" not in p.stderr
    assert "resumed from step 1" in p.stdout  # at the default verbosity, not only in the logs
    assert "2.damaged-1" in os.listdir(os.path.join(resumed, "checkpoints"))  # set aside, every file kept
    read = lambda d: [json.loads(ln) for ln in open(os.path.join(d, "metrics.jsonl"))]  # as written
    before, after = read(wd), read(resumed)
    assert [r["step"] for r in after] == [0, 1]
    assert after[0] == before[0]  # kept as it was: the resume truncates only the steps it runs again
    same = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}  # all but the wall clock
    assert same(after[1]) == pytest.approx(same(before[1]), rel=1e-6, abs=1e-7)
    assert Checkpointer(resumed).latest_step() == 2
    assert after[1]["time/compiles"] > 0 and after[1]["time/compile_cache_hits"] > 0  # loaded, not compiled again
