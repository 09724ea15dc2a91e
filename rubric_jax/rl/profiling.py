"""jax.profiler helpers: trace chosen training steps into `<workdir>/profile`.

    for step in range(start, steps):
        with maybe_profile(step, config.profile_steps, workdir):
            with timer.phase("judge") as ph: ...          # PhaseTimer phases are TraceAnnotations already
            with phase_annotation("update"): ...          # or annotate directly

A traced step writes `<workdir>/profile/plugins/profile/<run>/<host>.xplane.pb` (+ `.trace.json.gz`), readable by
TensorBoard's profile plugin, XProf or Perfetto. The step is wrapped in a StepTraceAnnotation("train", step_num),
so the tools split the trace by step. Values produced inside the step must be blocked on (PhaseTimer does) before
the context exits, or the asynchronous device work spills out of the trace window.
"""
from __future__ import annotations

import contextlib
import glob
import os
from typing import Iterable, Iterator, Optional, Union

import jax

__all__ = ["PROFILE_SUBDIR", "parse_profile_steps", "should_profile", "maybe_profile", "phase_annotation",
           "trace_files"]

PROFILE_SUBDIR = "profile"

ProfileSteps = Union[None, int, str, Iterable[int]]


def parse_profile_steps(profile_steps: ProfileSteps) -> frozenset[int]:
    """None / negative int / "" -> no steps; int N -> {N}; "3,5" or [3, 5] -> {3, 5}."""
    if profile_steps is None:
        return frozenset()
    if isinstance(profile_steps, bool):
        raise TypeError(f"profile_steps must be an int, a list of ints or a comma-separated string, got {profile_steps!r}")
    if isinstance(profile_steps, int):
        return frozenset() if profile_steps < 0 else frozenset({profile_steps})
    if isinstance(profile_steps, str):
        parts = [p.strip() for p in profile_steps.split(",") if p.strip()]
        return frozenset(int(p) for p in parts if int(p) >= 0)
    return frozenset(int(s) for s in profile_steps if int(s) >= 0)


def should_profile(step: int, profile_steps: ProfileSteps) -> bool:
    return int(step) in parse_profile_steps(profile_steps)


@contextlib.contextmanager
def maybe_profile(step: int, profile_steps: ProfileSteps, workdir: Optional[str | os.PathLike],
                  name: str = "train") -> Iterator[bool]:
    """Traces this step with jax.profiler when `step` is one of `profile_steps`; otherwise does nothing.

    Yields whether the step is being traced. Only one trace may run at a time in a process.
    """
    if workdir is None or not should_profile(step, profile_steps):
        yield False
        return
    logdir = os.path.join(os.fspath(workdir), PROFILE_SUBDIR)
    os.makedirs(logdir, exist_ok=True)
    with jax.profiler.trace(logdir, create_perfetto_link=False):
        with jax.profiler.StepTraceAnnotation(name, step_num=int(step)):
            yield True


def phase_annotation(name: str, **kwargs):
    """A named range in the trace (cheap when no trace is running)."""
    return jax.profiler.TraceAnnotation(name, **kwargs)


def trace_files(workdir: str | os.PathLike) -> list[str]:
    """The *.xplane.pb files written under `<workdir>/profile`, oldest run first."""
    pattern = os.path.join(os.fspath(workdir), PROFILE_SUBDIR, "plugins", "profile", "*", "*.xplane.pb")
    return sorted(glob.glob(pattern))
