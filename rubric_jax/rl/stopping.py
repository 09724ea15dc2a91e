"""Stopping is saving: SIGTERM (how SLURM and Kubernetes preempt) and SIGINT (Ctrl-C) end a run with a
checkpoint of its last completed step and one line, never a traceback.

One process: the first signal abandons the step in flight at once (a judged step can take minutes, more than
a scheduler's grace period) by raising `Stopped` in the main thread; the trainer's crash path then saves the
state from before that step, which is the state after the last completed one. While the tail of a step runs
(its periodic save, its metrics line) the signal is held until the step is complete, so a step is either
wholly kept or wholly redone (`held`, then `boundary`). Several processes: a signal usually reaches one of them, and a checkpoint save is
collective, so the signal only sets a flag; at the next step boundary the processes agree through a gather
(`boundary`), and every one of them raises `Stopped` there and saves the same, finished step.

A second signal while the first is being handled (most often: during that save) exits at once with the same
status: orbax renames a checkpoint into place only once it is complete, so the previous one stays the newest.
Exit statuses are the shell's, 128 + the signal number: 143 for SIGTERM, 130 for SIGINT.

Python runs a signal handler wherever the main thread is, and that may be a place whose exceptions go nowhere:
a garbage-collector callback (JAX registers one), a `__del__`, a weakref callback. There `Stopped` would be
printed as "Exception ignored in ..." with a traceback and lost. A process-wide `sys.unraisablehook` catches
exactly those: it drops the report and sends the signal again a moment later, when the main thread is back in
code that propagates it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
from typing import Callable, Optional

from rubric_jax.rl.unraisable import intercept

SIGNALS = (signal.SIGTERM, signal.SIGINT)

__all__ = ["SIGNALS", "Stopped", "StopSignals", "resume_command"]


class Stopped(BaseException):
    """A run stopped by a signal. A BaseException, like KeyboardInterrupt: a handler of `Exception` on the way
    up (a retry loop, a judge's fallback) must not swallow a preemption."""

    def __init__(self, signum: int, *, finished_step: bool = False):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.finished_step = finished_step  # True: stopped at a step boundary; False: the step was abandoned
        self.step: Optional[int] = None  # the step the signal came in (set by the trainer)
        self.saved: Optional[int] = None  # the newest checkpoint on the way out (set by the trainer)
        self.checkpoints: str = ""

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self, command: str) -> str:
        """The one line printed on the way out."""
        if self.step is None:
            where = "before the first step"
        elif self.finished_step:
            where = f"after step {self.step - 1} finished"
        else:
            where = f"in step {self.step}, which was abandoned (it is redone on resume)"
        if self.saved:
            kept = f"checkpoint {self.saved} ({self.checkpoints}) holds every step before it"
        else:
            kept = "no step was completed, nothing to save"
        return f"stopped by {self.name} {where}; {kept}; resume with: {command}"


def resume_command(argv: Optional[list[str]] = None) -> str:
    """The command line that started this process, as `python -m rubric_jax.main ...` (argv[0] of a `-m` run is
    the module's file, which is not what a user types)."""
    argv = list(sys.argv if argv is None else argv)
    head = ["python", "-m", "rubric_jax.main"] if argv and argv[0].endswith(os.path.join("rubric_jax", "main.py")) \
        else ["python", argv[0]] if argv else ["python"]
    return " ".join(shlex.quote(a) for a in head + argv[1:])


_ACTIVE: Optional["StopSignals"] = None  # the run whose handlers are installed


def _catch_lost_stops() -> None:
    """Gives a `Stopped` raised where Python ignores exceptions back to the run that raised it (`unraisable`:
    one process-wide hook; every other report goes on as before)."""

    def handles(u) -> bool:
        run = _ACTIVE
        if run is not None and isinstance(u.exc_value, Stopped):
            run._lost(u.exc_value.signum)
            return True
        return False

    intercept("lost_stops", handles)


class StopSignals:
    """SIGTERM / SIGINT handlers for the duration of a run (the previous handlers come back on exit).

    immediate: raise `Stopped` at the signal (one process), else only record it for `boundary` (several).
    gather: f(int) -> list[int] over every process, for `boundary`'s agreement (None: this process alone).
    Handlers can only be installed from the main thread; elsewhere (a test running a trainer in a thread)
    this does nothing and signals keep their usual effect.
    """

    def __init__(self, immediate: bool = True, gather: Optional[Callable[[int], list[int]]] = None):
        self.immediate = immediate
        self.gather = gather
        self.received: Optional[int] = None
        self._held = 0  # > 0: inside `held()`, the signal waits for its end
        self._handling = False  # a Stopped was raised: the next signal exits at once
        self._previous: dict[int, object] = {}
        self._resend: Optional[int] = None  # a Stopped was swallowed: this signal is on its way again
        self._timer: Optional[threading.Timer] = None

    def __enter__(self) -> "StopSignals":
        global _ACTIVE
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handler)
            _catch_lost_stops()
            _ACTIVE = self
        return self

    def __exit__(self, *exc) -> None:
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        self._resend = None
        if self._timer is not None:
            self._timer.cancel()
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()

    def _lost(self, signum: int) -> None:
        """The Stopped just raised was swallowed (see the module's docstring): the stop is not under way, so
        the signal is sent again, from a timer thread since anything raised in here would be swallowed too."""
        self._handling = False
        self._resend = signum
        self._timer = threading.Timer(0.05, self._send_again)
        self._timer.daemon = True
        self._timer.start()

    def _send_again(self) -> None:
        signum = self._resend
        if signum is not None and self._previous:
            os.kill(os.getpid(), signum)

    def _handler(self, signum, frame) -> None:
        again = self._resend == signum
        self._resend = None
        if again:
            if self._handling:  # the run reached a boundary meanwhile and is stopping already
                return
        elif self.received is not None or self._handling:
            # Second signal: whatever is being written stays unfinished, and the previous checkpoint intact.
            print(f"second {signal.Signals(signum).name} while stopping: exiting now without saving; the newest "
                  f"complete checkpoint is unchanged", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.received = signum
        if self.immediate and not self._held:
            self._handling = True
            raise Stopped(signum)

    @contextlib.contextmanager
    def held(self):
        """A stretch that must not be cut (the end of a step: its save, its metrics): a signal inside it is
        acted on at the next `boundary`."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1

    def boundary(self) -> None:
        """Between steps: raises Stopped when a signal came in (several processes: in any of them; a collective,
        so every process calls it at the same step, and every one raises)."""
        signum = self.received or 0
        if self.gather is not None:
            signum = next((s for s in self.gather(signum) if s), 0)
        if signum:
            self._handling = True
            raise Stopped(signum, finished_step=True)

    def stopping(self) -> None:
        """Marks the way out (a crash or a stop being saved): a signal from here on exits at once."""
        self._handling = True
