"""jax.profiler helpers: trace chosen training steps into `<workdir>/profile`.

    for step in range(start, steps):
        with maybe_profile(step, config.profile_steps, workdir):
            with timer.phase("judge") as ph: ...          # PhaseTimer phases are TraceAnnotations already
            with phase_annotation("update"): ...          # or annotate directly

A traced step writes `<workdir>/profile/plugins/profile/<run>/<host>.xplane.pb` (+ `.trace.json.gz`), readable by
TensorBoard's profile plugin, XProf or Perfetto. The step is wrapped in a StepTraceAnnotation("train", step_num),
so the tools split the trace by step. Values produced inside the step must be blocked on (PhaseTimer does) before
the context exits, or the asynchronous device work spills out of the trace window.

The Python tracer is off by default (`profile_options`): on a real step it records every Python call, and the
Chrome/Perfetto JSON export, cut at 1,000,000 events, is mostly that noise. Turn it on with
`--config.profile_python=True` (maybe_profile(..., python=True)) to see host-side Python time.

Name device work with `scope("judge/heads")` (an alias of `jax.named_scope`) inside the jitted code: XLA keeps
the scope in each HLO op's metadata (op_name "jit(f)/judge/heads/dot_general"), and
`python -m rubric_jax.profile_summary WORKDIR` sums the device time of the newest trace per scope and phase.
"""
from __future__ import annotations

import contextlib
import glob
import os
from typing import Iterable, Iterator, Optional, Union

import jax

__all__ = ["PROFILE_SUBDIR", "parse_profile_steps", "should_profile", "profile_options", "maybe_profile",
           "phase_annotation", "scope", "trace_files"]

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


def profile_options(python: bool = False, host_tracer_level: int = 2) -> jax.profiler.ProfileOptions:
    """jax.profiler options: the Python tracer off unless `python`, host TraceMe events at `host_tracer_level`
    (1 critical, 2 info = jax's default, 3 verbose), and the HLO protos kept (profile_summary needs their op
    metadata to map device ops to named scopes)."""
    if host_tracer_level not in (0, 1, 2, 3):
        raise ValueError(f"host_tracer_level must be 0..3, got {host_tracer_level!r}")
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 1 if python else 0
    options.host_tracer_level = int(host_tracer_level)
    options.enable_hlo_proto = True
    return options


@contextlib.contextmanager
def maybe_profile(step: int, profile_steps: ProfileSteps, workdir: Optional[str | os.PathLike],
                  name: str = "train", python: bool = False, host_tracer_level: int = 2) -> Iterator[bool]:
    """Traces this step with jax.profiler when `step` is one of `profile_steps`; otherwise does nothing.

    `python` turns on the Python tracer (off by default: it floods the trace, see the module docstring).
    Yields whether the step is being traced. Only one trace may run at a time in a process.
    """
    if workdir is None or not should_profile(step, profile_steps):
        yield False
        return
    logdir = os.path.join(os.fspath(workdir), PROFILE_SUBDIR)
    os.makedirs(logdir, exist_ok=True)
    options = profile_options(python=bool(python), host_tracer_level=host_tracer_level)
    with jax.profiler.trace(logdir, create_perfetto_link=False, profiler_options=options):
        with jax.profiler.StepTraceAnnotation(name, step_num=int(step)):
            yield True


def phase_annotation(name: str, **kwargs):
    """A named range in the trace (cheap when no trace is running)."""
    return jax.profiler.TraceAnnotation(name, **kwargs)


def scope(name: str):
    """Names the device work traced inside it (use within jitted code): `with scope("judge/heads"): ...`.

    The same as `jax.named_scope(name)`; "/" nests ("judge/heads" == scope "judge" around scope "heads").
    The first component is the phase profile_summary groups by (judge, sample, update, ...).
    """
    return jax.named_scope(name)


def trace_files(workdir: str | os.PathLike) -> list[str]:
    """The *.xplane.pb files written under `<workdir>/profile`, oldest run first."""
    pattern = os.path.join(os.fspath(workdir), PROFILE_SUBDIR, "plugins", "profile", "*", "*.xplane.pb")
    return sorted(glob.glob(pattern))
