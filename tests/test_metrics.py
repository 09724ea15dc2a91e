"""MetricsWriter (JSONL + TensorBoard), ConsoleProgress, PhaseTimer and the profiler helper."""
import glob
import gzip
import json
import math
import os
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax.rl import profiling
from rubric_jax.rl.metrics import (ConsoleProgress, MetricsWriter, PhaseTimer, flatten_metrics, format_duration,
                                   read_metrics)


def _read_tb_events(logdir):
    """Parses TensorBoard event files by hand (TFRecord framing + tensorboardX's Event proto); no TF needed."""
    from tensorboardX.proto import event_pb2
    events = []
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            pos += 12  # length + masked crc of length
            ev = event_pb2.Event()
            ev.ParseFromString(data[pos:pos + length])
            pos += length + 4  # payload + masked crc of payload
            events.append(ev)
    return events


def _tb_scalars(logdir):
    out = {}
    for ev in _read_tb_events(logdir):
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return out


def test_flatten_metrics():
    flat = flatten_metrics({"loss": jnp.float32(0.5), "win_rate": {"c1": 0.25, "c2": np.float64(0.75)},
                            "weights": jnp.array([0.2, 0.8]), "n": 3, "ok": True, "skip": None,
                            "one": np.array([1.5])})
    assert flat == {"loss": 0.5, "win_rate/c1": 0.25, "win_rate/c2": 0.75, "weights/0": pytest.approx(0.2),
                    "weights/1": pytest.approx(0.8), "n": 3.0, "ok": 1.0, "one": 1.5}
    assert all(type(v) is float for v in flat.values())
    with pytest.raises(TypeError, match="meta/name"):
        flatten_metrics({"meta": {"name": "x"}})


def test_jsonl_content_nonfinite_and_tensorboard(tmp_path):
    w = MetricsWriter(tmp_path)
    w.write_scalars(0, {"reward": {"mean": 0.5, "std": 0.1}, "loss": jnp.float32(1.25)})
    w.write_scalars(1, {"reward": {"mean": 0.75, "std": 0.2}, "loss": float("nan"), "grad_norm": float("inf"),
                        "kl": -math.inf})
    # flushed on every write: readable before close
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0]) == {"step": 0, "reward/mean": 0.5, "reward/std": 0.1, "loss": 1.25}
    raw = json.loads(lines[1])  # strict JSON (no bare NaN tokens)
    assert raw["loss"] == "NaN" and raw["grad_norm"] == "Infinity" and raw["kl"] == "-Infinity"
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [0, 1]
    assert math.isnan(recs[1]["loss"]) and recs[1]["grad_norm"] == math.inf and recs[1]["kl"] == -math.inf
    w.write_texts(1, {"sample": "once upon a time"})
    w.write_hparams({"lr": 5e-6, "model": {"name": "smollm2", "lora_rank": 32}, "targets": ["q", "v"]})
    w.close()
    assert json.loads((tmp_path / "hparams.json").read_text())["model"]["lora_rank"] == 32
    assert read_metrics(tmp_path, "texts.jsonl") == [{"step": 1, "sample": "once upon a time"}]

    scalars = _tb_scalars(tmp_path / "tb")
    assert scalars["reward/mean"] == [(0, 0.5), (1, 0.75)]
    assert scalars["loss"][0] == (0, 1.25) and math.isnan(scalars["loss"][1][1])
    tags = {v.tag for ev in _read_tb_events(tmp_path / "tb") for v in ev.summary.value}
    assert "sample/text_summary" in tags or "sample" in tags
    assert "_hparams_/experiment" in tags


def test_truncate_after_and_resume(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=False)
    for s in range(6):
        w.write_scalars(s, {"x": s})
    assert w.truncate_after(4) == 2
    w.write_scalars(4, {"x": 40})
    w.close()
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 40)]

    # a torn last line (crash mid-write) is ignored by the reader and dropped by the resume
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "x": 5')
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]
    w = MetricsWriter(tmp_path, tensorboard=True, resume_step=3)  # checkpoint at 3: steps 3, 4 run again
    w.write_scalars(3, {"x": 33})
    w.write_scalars(4, {"x": 44})
    w.close()
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2, 3, 4]
    assert [r["x"] for r in recs] == [0, 1, 2, 33, 44]
    # TensorBoard gets a purge marker at the resumed step (SessionLog.START with step 3)
    starts = [ev.step for ev in _read_tb_events(tmp_path / "tb") if ev.HasField("session_log")]
    assert 3 in starts


def test_write_parameter_overview(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=False)
    table = w.write_parameter_overview(0, {"lora": {"a": jnp.ones((4, 2))}})
    w.close()
    assert "lora/a" in table and "(4, 2)" in table
    assert "lora/a" in read_metrics(tmp_path, "texts.jsonl")[0]["parameters"]


def test_disabled_writer_writes_nothing(tmp_path):
    w = MetricsWriter(tmp_path / "other_host", enabled=False)
    assert w.write_scalars(0, {"x": 1}) == {"x": 1.0}
    w.close()
    assert not (tmp_path / "other_host").exists()


class _FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_console_progress_line_format():
    clock, lines = _FakeClock(), []
    p = ConsoleProgress(100, keys=("reward/mean", "loss", "missing"), ema=0.5, log_fn=lines.append, clock=clock)
    clock.t = 30.0  # first step includes compilation
    p.update(0, {"reward": {"mean": 0.5}, "loss": -0.0031})
    clock.t = 32.0
    p.update(1, {"reward": {"mean": 0.512}, "loss": -0.0031})
    clock.t = 36.0
    line = p.update(2, {"reward": {"mean": 0.25}, "loss": 1e-5})
    assert lines[0].startswith("step 0/100 | 30.00 s/step | ETA 49:30")
    assert lines[1] == "step 1/100 | 2.00 s/step | ETA 3:16 | reward/mean 0.512 | loss -0.0031"
    # EMA: 0.5 * 2 + 0.5 * 4 = 3 s/step, 97 steps left
    assert line == "step 2/100 | 3.00 s/step | ETA 4:51 | reward/mean 0.25 | loss 1.000e-05"
    assert lines[-1] == line and len(lines) == 3
    assert format_duration(3 * 3600 + 62) == "3:01:02" and format_duration(float("nan")) == "?"


def test_phase_timer_blocks_and_accumulates():
    clock = _FakeClock()
    t = PhaseTimer(clock=clock)
    with t.phase("sample") as ph:
        clock.t += 1.5
        out = ph.block(jnp.ones((4,)) * 2)
    assert float(out.sum()) == 8.0
    for _ in range(2):  # micro-batches accumulate
        with t.phase("update"):
            clock.t += 0.25
    y = t.run("judge", lambda a: a + 1, jnp.zeros(3))
    assert y.shape == (3,)
    assert t.metrics() == {"time/sample": 1.5, "time/update": 0.5, "time/judge": 0.0}
    t.reset()
    assert t.metrics() == {}
    # real clock: blocking makes the phase include the device work
    real = PhaseTimer()
    with real.phase("matmul") as ph:
        ph.block(jnp.ones((256, 256)) @ jnp.ones((256, 256)))
    assert real.metrics()["time/matmul"] > 0


def test_parse_profile_steps():
    assert profiling.parse_profile_steps(None) == frozenset()
    assert profiling.parse_profile_steps(-1) == frozenset()
    assert profiling.parse_profile_steps(3) == {3}
    assert profiling.parse_profile_steps("3, 5") == {3, 5}
    assert profiling.parse_profile_steps([0, 7]) == {0, 7}
    assert profiling.should_profile(5, "3,5") and not profiling.should_profile(4, [3, 5])


def test_maybe_profile_writes_trace(tmp_path):
    with profiling.maybe_profile(0, 1, tmp_path) as active:
        assert not active
    assert profiling.trace_files(tmp_path) == []
    timer = PhaseTimer()
    try:
        with profiling.maybe_profile(1, [1], tmp_path) as active:
            assert active
            with timer.phase("judge_phase") as ph:
                ph.block(jnp.ones((64, 64)) @ jnp.ones((64, 64)))
            with profiling.phase_annotation("update_phase"):
                jax.block_until_ready(jnp.arange(10.0).sum())
    except Exception as e:  # pragma: no cover - depends on the jaxlib build
        pytest.skip(f"jax.profiler cannot trace on this machine: {e!r}")
    files = profiling.trace_files(tmp_path)
    assert len(files) == 1 and os.path.getsize(files[0]) > 0
    traces = glob.glob(os.path.join(os.path.dirname(files[0]), "*.trace.json.gz"))
    if traces:  # the Chrome-trace export carries the annotation names
        text = gzip.open(traces[0]).read().decode("utf-8", "replace")
        assert "judge_phase" in text and "update_phase" in text
