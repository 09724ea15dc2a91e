"""Per-step metrics: JSONL + TensorBoard event files, console progress, phase timing.

Files under the workdir:
  metrics.jsonl   one JSON object per `write_scalars` call: {"step": int, "<name>": float, ...}. Nested dicts are
                  flattened with "/" ({"win_rate": {"c1": .4}} -> "win_rate/c1"); arrays of more than one element
                  become "<name>/<i>". Non-finite floats are written as the strings "NaN", "Infinity",
                  "-Infinity" (the file stays strict JSON; `read_metrics` turns them back into floats). Every line
                  is flushed when written, so a crash loses nothing already written.
  texts.jsonl     {"step": int, "<name>": str} per `write_texts` call (sample completions, rubric revisions).
  hparams.json    the last `write_hparams` dict.
  tb/             TensorBoard event files written by tensorboardX (no TensorFlow): scalars, texts, hparams.

Resume: `MetricsWriter(workdir, resume_step=s)` (or `truncate_after(s)`) drops every JSONL line with step >= s, so
the resumed run, which writes steps s, s+1, ... again, leaves no duplicates; the TensorBoard writer is opened with
`purge_step=s`, which makes TensorBoard discard the old run's events at steps >= s.

clu: `clu.metric_writers` and `clu.periodic_actions` import TensorFlow at import time, so they are not used; the
writer follows clu's MetricWriter method names (write_scalars / write_texts / write_hparams / flush / close) and
`write_parameter_overview` uses `clu.parameter_overview` (which imports without TensorFlow).

Only process 0 writes or prints (multi-host); the others get no-op writers.

Naming: a metric whose value depends on the machine, the process' history or a cache rather than on the
run's data and seed (wall times, compilation counts, compile-cache hits, judge packing) is named "time/...",
so resume and cross-run comparisons can skip that one prefix.
"""
from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import jax
import numpy as np

from rubric_jax.errors import UserError

__all__ = [
    "METRICS_FILE", "TEXTS_FILE", "TB_SUBDIR", "flatten_metrics", "MetricsWriter", "read_metrics",
    "truncate_jsonl", "ConsoleProgress", "PhaseTimer", "format_duration", "CompileCounter",
]

METRICS_FILE = "metrics.jsonl"
TEXTS_FILE = "texts.jsonl"
HPARAMS_FILE = "hparams.json"
TB_SUBDIR = "tb"

_NONFINITE_OUT = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_NONFINITE_IN = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _is_main_process() -> bool:
    try:
        return jax.process_index() == 0
    except Exception:  # pragma: no cover - backend not initialisable
        return True


# ---------------------------------------------------------------------------------------------------------------
# flattening / encoding
# ---------------------------------------------------------------------------------------------------------------

def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, float]:
    """Nested mapping of scalars (Python, numpy or jax) -> flat {"a/b": float}.

    One `jax.device_get` for the whole tree (one host sync). Arrays of size 1 become a float, larger arrays
    "<name>/<i>" over their flattened elements; None values are dropped; anything else raises TypeError naming
    the key.
    """
    metrics = jax.device_get(metrics)
    out: dict[str, float] = {}

    def visit(name: str, v: Any) -> None:
        if isinstance(v, Mapping):
            for k, sub in v.items():
                visit(f"{name}{sep}{k}" if name else str(k), sub)
            return
        if v is None:
            return
        if isinstance(v, (bool, int, float, np.generic, np.ndarray)):
            arr = np.asarray(v)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"metric {name!r}: not a number (dtype {arr.dtype})")
            if arr.size == 1:
                out[name] = float(arr.reshape(()))
            else:
                for i, x in enumerate(arr.reshape(-1)):
                    out[f"{name}{sep}{i}"] = float(x)
            return
        if isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                visit(f"{name}{sep}{i}", x)
            return
        raise TypeError(f"metric {name!r}: unsupported value of type {type(v).__name__}")

    for k, v in metrics.items():
        visit(f"{prefix}{sep}{k}" if prefix else str(k), v)
    return out


def _encode(x: float):
    if math.isfinite(x):
        return x
    return _NONFINITE_OUT["nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")]


def _decode(v):
    if isinstance(v, str) and v in _NONFINITE_IN:
        return _NONFINITE_IN[v]
    return v


def read_metrics(workdir: str | os.PathLike, filename: str = METRICS_FILE) -> list[dict]:
    """All records of `<workdir>/metrics.jsonl`, in file order, non-finite strings decoded to floats.

    A torn last line (a crash in the middle of a write) is ignored. Missing file -> [].
    """
    path = os.path.join(os.fspath(workdir), filename)
    if not os.path.exists(path):
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # unterminated last line: an interrupted write
                continue
            raise ValueError(f"{path}:{i + 1}: not a JSON object: {line[:80]!r}") from None
        records.append({k: _decode(v) for k, v in rec.items()})
    return records


def truncate_jsonl(path: str | os.PathLike, step: int) -> int:
    """Atomically rewrites a JSONL file keeping only lines with "step" < `step` (and dropping a torn last line).

    Returns the number of lines dropped. A missing file is left missing.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            if int(rec.get("step", -1)) >= step:
                dropped += 1
            else:
                kept.append(line if line.endswith("\n") else line + "\n")
    if dropped:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return dropped


# ---------------------------------------------------------------------------------------------------------------
# writer
# ---------------------------------------------------------------------------------------------------------------

class MetricsWriteError(UserError):
    """metrics.jsonl or texts.jsonl could not be written (a full disk, a quota): the run stops with one line."""


class MetricsWriter:
    """Writes scalars to `<workdir>/metrics.jsonl` and TensorBoard events to `<workdir>/tb`.

    `resume_step`: drop JSONL lines with step >= resume_step and purge TensorBoard events from that step on.
    `fsync`: also fsync after each line (survives a machine crash, not just a process crash).
    """

    def __init__(self, workdir: str | os.PathLike, tensorboard: bool = True, resume_step: Optional[int] = None,
                 fsync: bool = False, enabled: Optional[bool] = None):
        self.workdir = os.fspath(workdir)
        self.enabled = _is_main_process() if enabled is None else enabled
        self.fsync = fsync
        self._tb = None
        self._jsonl = None
        self._texts = None
        if not self.enabled:
            return
        os.makedirs(self.workdir, exist_ok=True)
        if resume_step is not None:
            self._truncate_files(resume_step)
        self._jsonl = open(os.path.join(self.workdir, METRICS_FILE), "a", encoding="utf-8")
        if tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(logdir=os.path.join(self.workdir, TB_SUBDIR), purge_step=resume_step,
                                     flush_secs=30)

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.workdir, METRICS_FILE)

    @property
    def tb_dir(self) -> str:
        return os.path.join(self.workdir, TB_SUBDIR)

    def _truncate_files(self, step: int) -> int:
        n = truncate_jsonl(os.path.join(self.workdir, METRICS_FILE), step)
        truncate_jsonl(os.path.join(self.workdir, TEXTS_FILE), step)
        return n

    def truncate_after(self, step: int) -> int:
        """Drops every JSONL record with step >= `step` (the first step a resumed run writes again); returns how
        many metrics lines were dropped. TensorBoard is purged via `resume_step` at construction instead."""
        if not self.enabled:
            return 0
        for f in (self._jsonl, self._texts):
            if f is not None:
                f.close()
        self._texts = None
        n = self._truncate_files(step)
        self._jsonl = open(self.metrics_path, "a", encoding="utf-8")
        return n

    def _write_line(self, f, record: dict) -> None:
        try:
            f.write(json.dumps(record, allow_nan=False) + "\n")
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        except OSError as e:  # a full disk or a quota: one line naming the file, not a traceback
            raise MetricsWriteError(f"step {record.get('step')}: writing {f.name} failed ({e.strerror or e}); "
                                    f"the checkpoints are untouched: make room, then rerun the same command to "
                                    f"resume") from e

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> dict[str, float]:
        """Writes one record for `step`; returns the flattened floats (NaN/inf as floats)."""
        flat = flatten_metrics(scalars)
        if not self.enabled:
            return flat
        step = int(step)
        self._write_line(self._jsonl, {"step": step, **{k: _encode(v) for k, v in flat.items()}})
        if self._tb is not None:
            for k, v in flat.items():
                self._tb.add_scalar(k, v, global_step=step)
            self._tb.flush()
        return flat

    write = write_scalars

    def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
        if not self.enabled:
            return
        if self._texts is None:
            self._texts = open(os.path.join(self.workdir, TEXTS_FILE), "a", encoding="utf-8")
        self._write_line(self._texts, {"step": int(step), **{k: str(v) for k, v in texts.items()}})
        if self._tb is not None:
            for k, v in texts.items():
                self._tb.add_text(k, str(v), global_step=int(step))
            self._tb.flush()

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        """Config snapshot: `<workdir>/hparams.json` and the TensorBoard HParams plugin (values flattened with "/";
        non-scalar values stringified)."""
        if not self.enabled:
            return
        flat = {}

        def visit(name, v):
            if isinstance(v, Mapping):
                for k, sub in v.items():
                    visit(f"{name}/{k}" if name else str(k), sub)
            elif isinstance(v, (bool, str)):
                flat[name] = v
            elif isinstance(v, (int, float, np.generic)):
                flat[name] = float(v)
            else:
                flat[name] = str(v)

        visit("", _to_plain(hparams))
        tmp = os.path.join(self.workdir, HPARAMS_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(_to_plain(hparams), f, indent=2, sort_keys=True, default=str)
        os.replace(tmp, os.path.join(self.workdir, HPARAMS_FILE))
        if self._tb is not None:
            from tensorboardX.summary import hparams as hparams_summary
            fw = self._tb._get_file_writer()
            for summary in hparams_summary(flat, {}):
                fw.add_summary(summary)
            self._tb.flush()

    def write_parameter_overview(self, step: int, params: Any, name: str = "parameters") -> str:
        """A table of parameter names, shapes, dtypes, sizes, mean and std (clu.parameter_overview), as text."""
        from clu import parameter_overview
        table = parameter_overview.get_parameter_overview(params)
        self.write_texts(step, {name: "```\n" + table + "\n```"})
        return table

    def flush(self) -> None:
        for f in (self._jsonl, self._texts):
            if f is not None:
                f.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        for f in (self._jsonl, self._texts):
            if f is not None:
                f.close()
        self._jsonl = self._texts = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _to_plain(obj):
    """ConfigDict / FrozenConfigDict / mappings -> plain dicts, for JSON."""
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    if isinstance(obj, Mapping):
        return {str(k): _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


# ---------------------------------------------------------------------------------------------------------------
# console progress
# ---------------------------------------------------------------------------------------------------------------

def format_duration(seconds: float) -> str:
    """1:02:03 style (h:mm:ss), or m:ss under an hour; '?' when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _format_value(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.3e}"
    return f"{v:.4g}"


class ConsoleProgress:
    """One line per step: `step 12/1300 | 4.21 s/step | ETA 1:30:12 | reward/mean 0.512 | loss -0.0031`.

    s/step is an exponential moving average (`ema` weight on the past) of the wall time between `update` calls;
    the first step (compilation) only seeds it. `keys`: metric names (after flattening) to show, in order; missing
    ones are skipped. `log_fn` defaults to print(flush=True); pass absl's logging.info to log instead.
    Steps are 0-based: after step s, s + 1 of `total_steps` are done.
    """

    DEFAULT_KEYS = ("reward/mean", "loss", "kl", "clip_frac", "completion_len/mean")

    def __init__(self, total_steps: int, keys: Sequence[str] = DEFAULT_KEYS, ema: float = 0.9,
                 log_fn: Optional[Callable[[str], Any]] = None, every: int = 1, enabled: Optional[bool] = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.total_steps = int(total_steps)
        self.keys = tuple(keys)
        self.ema = float(ema)
        self.log_fn = log_fn or (lambda s: print(s, flush=True))
        self.every = max(1, int(every))
        self.enabled = _is_main_process() if enabled is None else enabled
        self._clock = clock
        self._last = clock()
        self._n = 0
        self.sec_per_step: Optional[float] = None

    def reset_clock(self) -> None:
        """Call after a long pause (e.g. an eval or checkpoint restore) so it is not counted as a step."""
        self._last = self._clock()

    def update(self, step: int, metrics: Optional[Mapping[str, Any]] = None) -> str:
        now = self._clock()
        dt, self._last = now - self._last, now
        self._n += 1
        if self.sec_per_step is None or self._n <= 2:
            # step 1 includes compilation; let step 2 replace it instead of dragging the average for ages
            self.sec_per_step = dt
        else:
            self.sec_per_step = self.ema * self.sec_per_step + (1 - self.ema) * dt
        remaining = max(0, self.total_steps - int(step) - 1)
        parts = [f"step {int(step)}/{self.total_steps}", f"{self.sec_per_step:.2f} s/step",
                 f"ETA {format_duration(remaining * self.sec_per_step)}"]
        if metrics:
            flat = flatten_metrics(metrics)
            parts += [f"{k} {_format_value(flat[k])}" for k in self.keys if k in flat]
        line = " | ".join(parts)
        if self.enabled and (int(step) % self.every == 0 or remaining == 0):
            self.log_fn(line)
        return line


# ---------------------------------------------------------------------------------------------------------------
# phase timing
# ---------------------------------------------------------------------------------------------------------------

class _Phase:
    def __init__(self):
        self._values = []

    def block(self, *values):
        """Registers values to `jax.block_until_ready` when the phase ends (so async dispatch is timed);
        returns the value (or the tuple) for chaining: `out = ph.block(fn(x))`."""
        self._values.extend(values)
        return values[0] if len(values) == 1 else values


class PhaseTimer:
    """Wall time of named phases of a step, each also a jax.profiler TraceAnnotation.

        timer = PhaseTimer()
        with timer.phase("sample") as ph:
            rollouts = ph.block(sample(...))
        out = timer.run("judge", judge_fn, rollouts)      # same, for a call
        metrics.update(timer.metrics())                    # {"time/sample": s, "time/judge": s}
        timer.reset()

    A phase entered more than once in a step (micro-batches) accumulates. Phases may nest (each is timed whole).
    """

    def __init__(self, prefix: str = "time/", clock: Callable[[], float] = time.perf_counter):
        self.prefix = prefix
        self._clock = clock
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[_Phase]:
        ph = _Phase()
        with jax.profiler.TraceAnnotation(name):
            t0 = self._clock()
            try:
                yield ph
                if ph._values:
                    jax.block_until_ready(ph._values)
            finally:
                self.times[name] = self.times.get(name, 0.0) + (self._clock() - t0)

    def run(self, name: str, fn: Callable, *args, **kwargs):
        with self.phase(name) as ph:
            return ph.block(fn(*args, **kwargs))

    def metrics(self) -> dict[str, float]:
        return {f"{self.prefix}{k}": v for k, v in self.times.items()}

    def reset(self) -> None:
        self.times = {}


# ---------------------------------------------------------------------------------------------------------------
# compilation counting
# ---------------------------------------------------------------------------------------------------------------

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


class CompileCounter:
    """Counts XLA programs built in this process, through jax.monitoring listeners.

    JAX reports "/jax/core/compile/backend_compile_duration" (with the jitted function's name) once per
    program it builds, whether XLA compiled it or it was loaded from the persistent compilation cache
    (which also reports "/jax/compilation_cache/cache_hits"). In-memory jit cache hits report nothing.

        counter = CompileCounter().start()
        ...                                   # one training step
        metrics.update(counter.metrics())     # time/compiles, time/compile_cache_hits, time/compile_secs
        counter.stop()

    `by_name` counts programs per function name over the counter's life; `metrics()` covers the calls since
    the previous `metrics()`. Counts include every thread of the process.
    """

    def __init__(self):
        self.by_name: collections.Counter = collections.Counter()
        self.compiles = 0
        self.cache_hits = 0
        self.seconds = 0.0
        self._mark = (0, 0, 0.0)
        self._on = False

    def _on_duration(self, event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE_EVENT:
            self.compiles += 1
            self.seconds += float(duration)
            self.by_name[str(kwargs.get("fun_name", "?"))] += 1

    def _on_event(self, event: str, **kwargs) -> None:
        if event == CACHE_HIT_EVENT:
            self.cache_hits += 1

    def start(self) -> "CompileCounter":
        if not self._on:
            jax.monitoring.register_event_duration_secs_listener(self._on_duration)
            jax.monitoring.register_event_listener(self._on_event)
            self._on = True
        return self

    def stop(self) -> None:
        if self._on:
            jax.monitoring.unregister_event_duration_listener(self._on_duration)
            jax.monitoring.unregister_event_listener(self._on_event)
            self._on = False

    def __enter__(self) -> "CompileCounter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def metrics(self, prefix: str = "time/") -> dict[str, float]:
        now = (self.compiles, self.cache_hits, self.seconds)
        d = [a - b for a, b in zip(now, self._mark)]
        self._mark = now
        return {f"{prefix}compiles": float(d[0]), f"{prefix}compile_cache_hits": float(d[1]),
                f"{prefix}compile_secs": float(d[2])}
