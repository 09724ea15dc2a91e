"""rubric_jax.rl.stopping: what a signal does at each point of a step (the trainer's own runs are in
tests/test_trainer.py: a SIGINT inside a step, a SIGTERM at the command line)."""

import os
import signal
import subprocess
import sys

import pytest

from rubric_jax.rl.stopping import Stopped, StopSignals, resume_command


def test_a_signal_inside_a_step_stops_it_at_once():
    with StopSignals() as stops:
        with pytest.raises(Stopped) as e:
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("the handler did not raise")
        stops.stopping()
    assert (e.value.signum, e.value.exit_code, e.value.finished_step) == (signal.SIGTERM, 143, False)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the previous handler is back


def test_a_signal_while_a_step_is_saved_waits_for_the_boundary():
    with StopSignals() as stops:
        with stops.held():
            os.kill(os.getpid(), signal.SIGINT)  # nothing raised: the save and the metrics line finish
            finished = True
        assert finished
        with pytest.raises(Stopped) as e:
            stops.boundary()
    assert (e.value.exit_code, e.value.finished_step) == (130, True)


def test_several_processes_stop_together_at_the_boundary_whichever_got_the_signal():
    """The signal reached another process: this one, which got none, still stops at the same boundary."""
    calls = []

    def gather(x):
        calls.append(x)
        return [x, 0] if len(calls) == 1 else [x, int(signal.SIGTERM)]

    stops = StopSignals(immediate=False, gather=gather)
    stops.boundary()  # nobody signalled yet
    with pytest.raises(Stopped) as e:
        stops.boundary()
    assert calls == [0, 0] and e.value.signum == signal.SIGTERM and e.value.finished_step


def test_the_process_that_got_the_signal_finishes_its_step_when_several_run():
    with StopSignals(immediate=False, gather=lambda x: [0, x]) as stops:
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, not raised: the others are mid-step
        with pytest.raises(Stopped):
            stops.boundary()


def test_the_line_names_the_step_the_checkpoint_and_the_command():
    e = Stopped(signal.SIGTERM)
    e.step, e.saved, e.checkpoints = 7, 7, "/w/checkpoints"
    assert e.line("python -m rubric_jax.main --workdir=/w") == (
        "stopped by SIGTERM in step 7, which was abandoned (it is redone on resume); checkpoint 7 "
        "(/w/checkpoints) holds every step before it; resume with: python -m rubric_jax.main --workdir=/w")
    assert "before the first step" in Stopped(signal.SIGINT).line("x")
    assert "nothing to save" in Stopped(signal.SIGINT).line("x")
    argv = [os.path.join("/site", "rubric_jax", "main.py"), "--config=configs/rcrl.py:tiny", "--workdir=/a b"]
    assert resume_command(argv) == "python -m rubric_jax.main --config=configs/rcrl.py:tiny '--workdir=/a b'"


def test_a_second_signal_while_stopping_exits_at_once_with_the_signals_status():
    """The save after the first signal is cut short by a second one: the process ends at once (a run waiting
    on a stuck disk can still be stopped), status 143, one line saying the newest checkpoint is unchanged."""
    code = ("import os, signal, time\n"
            "from rubric_jax.rl.stopping import StopSignals\n"
            "with StopSignals() as s:\n"
            "    s.stopping()\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(30)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 143
    assert p.stderr.strip().splitlines() == ["second SIGTERM while stopping: exiting now without saving; the newest "
                                            "complete checkpoint is unchanged"]


def test_a_signal_landing_where_exceptions_are_ignored_still_stops_the_step_without_a_traceback(capfd):
    """The handler ran inside a garbage-collector callback (JAX has one), where Python prints a raised
    exception as "Exception ignored in ..." and drops it: CI saw that traceback on a SIGTERM. The stop must
    arrive in the step's own code all the same, and nothing be printed."""
    import gc
    import time

    def callback(phase, info):
        gc.callbacks.remove(callback)
        signal.raise_signal(signal.SIGTERM)  # runs the handler here, inside the callback

    with StopSignals() as stops:
        with pytest.raises(Stopped) as e:
            gc.callbacks.append(callback)
            gc.collect()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # the step's work goes on until the stop reaches it
                time.sleep(0.005)
            raise AssertionError("the swallowed stop never came back")
        stops.stopping()
    assert callback not in gc.callbacks
    assert (e.value.signum, e.value.finished_step) == (signal.SIGTERM, False)
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err


def test_the_stop_and_checkpoint_handlers_share_one_unraisable_hook_and_pass_the_rest_on(monkeypatch):
    """The lost-stop handler and the failed-save one sit behind one process-wide hook: installing either again,
    in any order, stacks nothing, and a report neither takes reaches the hook that was there before."""
    import gc

    from rubric_jax.rl import checkpoint_errors, stopping

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value).__name__))
    stopping._catch_lost_stops()
    hook = sys.unraisablehook
    checkpoint_errors._silence_abandoned_writes()
    stopping._catch_lost_stops()
    assert sys.unraisablehook is hook

    class Raises:
        def __init__(self, exc):
            self.exc = exc

        def __del__(self):
            raise self.exc

    Raises(Stopped(signal.SIGTERM))  # no run active: not the lost-stop handler's, so reported
    Raises(KeyError("k"))
    gc.collect()
    assert seen == ["Stopped", "KeyError"]
