"""Progress inside one long call: judge verdicts, update micro-batches, sampling batches.

At paper scale on a slow backend one training step takes minutes; the per-step line of the console comes
only at its end. Long-running loops (the judge engine's scoring calls, the policy's micro-batches, the
trainer's sampling batches) call `report(phase, done, total)`; that costs nothing unless a sink is installed
with `reporting(sink)`. The trainer installs a `StepPrinter`, which prints a line at most every
`interval` seconds, and only once a step has run that long, so short steps print nothing extra.

The sampler reports per call, not per token: a host callback inside its compiled decode loop would keep XLA's
persistent compilation cache from storing the sampler's program (programs with host callbacks are not
cached), and the cache is what makes a restarted run start quickly.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

Sink = Callable[[str, int, int, str], None]
_sinks: list[Sink] = []


def report(phase: str, done: int, total: int, unit: str = "") -> None:
    """`done` of `total` units of `phase` are finished (cheap when nobody listens)."""
    if _sinks:
        _sinks[-1](phase, int(done), int(total), unit)


def active() -> bool:
    """Whether a sink wants exact counts now (callers may then wait for the device so that `done` means
    finished). A sink with an `active` attribute decides (a StepPrinter only once its step has run long
    enough to print), so short steps never wait."""
    return bool(_sinks) and bool(getattr(_sinks[-1], "active", True))


@contextlib.contextmanager
def reporting(sink: Sink) -> Iterator[Sink]:
    """Sends `report` calls to `sink` inside the block (the innermost block wins)."""
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.remove(sink)


def format_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class StepPrinter:
    """Prints `step 3 | judge 1840/6656 verdicts | 2:10 in phase | ETA 5:40` lines during one step.

    The ETA assumes the phase's remaining units take as long as its finished ones did. A line is printed at
    most every `interval` seconds and not before the step has run `interval` seconds.
    """

    def __init__(self, step: int, interval: float = 30.0, print_fn: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter, enabled: bool = True,
                 expected: dict[str, float] | None = None, announce: bool = False):
        """expected: seconds each phase took in the previous step; a phase expected to take `interval` or more
        gets a line when it starts (its single calls, e.g. one sampler call, report nothing in between).
        announce: a line at the start of every phase (the first step of a slow run, with nothing to expect)."""
        self.step, self.interval, self.enabled = step, float(interval), enabled
        self.print_fn = print_fn or (lambda line: print(line, flush=True))
        self.clock = clock
        self.expected, self.announce = dict(expected or {}), announce
        self.start = self.last = clock()
        self.phase, self.phase_start = None, self.start

    @property
    def active(self) -> bool:
        """Exact counts matter only once a line may be printed: before that, callers need not wait."""
        return self.enabled and self.clock() - self.start >= self.interval

    def __call__(self, phase: str, done: int, total: int, unit: str = "") -> None:
        now = self.clock()
        if phase != self.phase:
            self.phase, self.phase_start = phase, now
            took = self.expected.get(phase, 0.0)
            if self.enabled and (self.announce or took >= self.interval):
                eta = f" | ETA {format_seconds(took)} (as in the last step)" if took else ""
                self.print_fn(f"  step {self.step} | {phase}: {total}{' ' + unit if unit else ''} to do{eta}")
                self.last = now
                return
        if not self.enabled or now - self.start < self.interval or now - self.last < self.interval:
            return
        self.last = now
        spent = now - self.phase_start
        parts = [f"step {self.step}", f"{phase} {done}/{total}{' ' + unit if unit else ''}",
                 f"{format_seconds(spent)} in phase"]
        if 0 < done < total:
            parts.append(f"ETA {format_seconds(spent / done * (total - done))}")
        self.print_fn("  " + " | ".join(parts))
