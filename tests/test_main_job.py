"""The README's main command: `python -m rubric_jax.main --config=configs/rcrl.py:tiny` trains the embedded
SmolLM2, and the same command with more steps resumes it."""

import glob
import os
import subprocess
import sys

import pytest

from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_main_trains_the_embedded_model_and_resumes(trained_workdir, tmp_path):
    """The README's first command (tiny variant; the session's shared run, conftest.trained_workdir), then the
    same command with more steps resumes it (on a copy). About 60 s on 2 cores: a real SmolLM2 step."""
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
    p = subprocess.run(cmd + ["--config.steps=3"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resumed from step 2" in p.stdout  # at the default verbosity, not only in the logs
    m = read_metrics(resumed)
    assert [r["step"] for r in m] == [0, 1, 2]
    assert Checkpointer(resumed).latest_step() == 3
    assert m[2]["time/compiles"] > 0 and m[2]["time/compile_cache_hits"] > 0  # loaded, not compiled again
