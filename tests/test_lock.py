"""One run per workdir (rubric_jax.rl.lock): a live holder refuses a second run with one line, a lock left by
a dead process is taken over with a warning, and the lock goes when the run ends."""

import json
import logging
import os
import subprocess
import sys

import pytest

from rubric_jax.rl.lock import LOCK_NAME, WorkdirLock, WorkdirLockedError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOLD = ("import sys, time\n"
         "from rubric_jax.rl.lock import WorkdirLock\n"
         "with WorkdirLock(sys.argv[1]):\n"
         "    print('locked', flush=True)\n"
         "    time.sleep(120)\n")


@pytest.fixture
def held(tmp_path):
    """A workdir whose lock a live process holds; yields (workdir, that process)."""
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), "--a-command"], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        yield str(tmp_path), p
    finally:
        p.kill()
        p.wait()


def test_a_second_run_is_refused_naming_the_holder(held):
    wd, p = held
    with pytest.raises(WorkdirLockedError) as e:
        WorkdirLock(wd).acquire()
    assert f"pid {p.pid} on host " in str(e.value) and "--a-command" in str(e.value)
    assert json.load(open(os.path.join(wd, LOCK_NAME)))["pid"] == p.pid  # the holder's file is untouched


@pytest.mark.slow
def test_the_command_line_refuses_with_one_line_before_the_model_loads(held):
    """The README's command on a workdir in use: exit 2, one `error:` line naming the holder, and nothing of
    the run written (no config.json, no checkpoints). A few seconds: JAX's import, no model."""
    wd, p = held
    r = subprocess.run([sys.executable, "-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny", f"--workdir={wd}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        f"error: {wd} is in use by another run (pid {p.pid} on host {os.uname().nodename}, started "
        f"{json.load(open(os.path.join(wd, LOCK_NAME)))['started']} (-c {wd} --a-command)): one run per workdir; "
        f"stop that run or give this one another --workdir"]
    assert sorted(os.listdir(wd)) == [LOCK_NAME]


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(tmp_path, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = {"host": "gone-host", "pid": int(dead.stdout), "started": "yesterday", "command": "old run"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(left))
    with caplog.at_level(logging.WARNING, logger="rubric_jax.rl.lock"):
        with WorkdirLock(str(tmp_path)):
            assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
            with pytest.raises(WorkdirLockedError):  # held now, even against this very process
                WorkdirLock(str(tmp_path)).acquire()
    assert any("no longer running" in r.message and f"pid {left['pid']} on host gone-host" in r.message
               for r in caplog.records)
    assert not (tmp_path / LOCK_NAME).exists()  # released with the run
    with WorkdirLock(str(tmp_path)):  # and free for the next one, with nothing to warn about
        pass
    assert sum("no longer running" in r.message for r in caplog.records) == 1
