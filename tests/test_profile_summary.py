"""profile_summary: device time per named scope from a jax.profiler trace; the Python tracer off by default."""
import gzip
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from rubric_jax import profile_summary
from rubric_jax.config_base import base_config, finalize
from rubric_jax.rl import profiling

PY_CALLS = 3000  # Python calls made inside the traced step: each is an event only when the Python tracer is on


@jax.jit
def _step(x, w):
    with profiling.scope("judge/heads"):
        h = jnp.tanh(x @ w)
        h = jnp.tanh(h @ w)
    with jax.named_scope("update"):
        with jax.named_scope("grad"):
            u = jnp.sin(h @ w.T)
            u = (u @ w).sum()
    return u


def _python_work(n):
    def leaf(i):
        return i + 1
    return sum(leaf(i) for i in range(n))


def _trace(workdir, python):
    x = jnp.ones((256, 256), jnp.float32) * 0.01
    w = jnp.ones((256, 256), jnp.float32) * 0.01
    jax.block_until_ready(_step(x, w))  # compile outside the trace
    with profiling.maybe_profile(7, "7", workdir, python=python) as active:
        assert active
        for _ in range(3):
            jax.block_until_ready(_step(x, w))
        _python_work(PY_CALLS)
    files = profiling.trace_files(workdir)
    assert len(files) == 1
    return files[0]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """{python: (workdir, xplane path)} for a trace without and one with the Python tracer."""
    out = {}
    for python in (False, True):
        workdir = str(tmp_path_factory.mktemp(f"python_{python}"))
        out[python] = (workdir, _trace(workdir, python))
    return out


def _rows(rows, key):
    return {r[key]: r for r in rows}


def test_profile_options():
    off, on = profiling.profile_options(), profiling.profile_options(python=True)
    assert off.python_tracer_level == 0 and on.python_tracer_level == 1
    assert off.host_tracer_level == 2 and off.enable_hlo_proto
    assert profiling.profile_options(host_tracer_level=1).host_tracer_level == 1
    with pytest.raises(ValueError):
        profiling.profile_options(host_tracer_level=5)


def test_config_has_profile_python_and_is_locked():
    c = finalize(base_config())
    assert c.profile_python is False
    c.profile_python = True
    assert c.profile_python is True
    with pytest.raises(AttributeError):
        c.profile_pyhton = True  # a misspelt override fails


def test_scopes_have_device_time(traced):
    workdir, path = traced[False]
    s = profile_summary.summarize(workdir)
    assert s["trace"] == os.path.abspath(path) and s["source"] == "xplane"
    scopes, phases = _rows(s["scopes"], "scope"), _rows(s["phases"], "phase")
    for scope, phase in (("judge/heads", "judge"), ("update/grad", "update")):
        assert scope in scopes, s["scopes"]
        # 3 calls x 2 matmuls per scope, each its own op (a matmul is not fused with its neighbours on CPU)
        assert scopes[scope]["count"] >= 6 and scopes[scope]["total_ms"] > 0 and scopes[scope]["share"] > 0
        assert scopes[scope]["phase"] == phase and phases[phase]["total_ms"] >= scopes[scope]["total_ms"]
    # the matmuls dominate: the two scopes hold most of the device time
    assert scopes["judge/heads"]["share"] + scopes["update/grad"]["share"] > 0.5
    assert s["device_ms"] == pytest.approx(sum(r["total_ms"] for r in s["phases"]))
    assert sum(r["share"] for r in s["scopes"]) == pytest.approx(1.0)
    assert s["device_events"] == sum(r["count"] for r in s["phases"])
    assert s["steps"] == [7] and s["step_ms"] > 0
    assert s["unresolved_ops"] < s["device_events"]
    # the longest HLO ops are the matmuls, each with the op_name jax gave it
    top = s["ops"][:4]
    assert all(o["scope"] in ("judge/heads", "update/grad") and o["op_name"].startswith("jit(_step)/") for o in top)
    assert all(o["total_ms"] > 0 and o["module"] == "jit__step" for o in top)


def test_python_tracer_off_by_default_and_on_when_asked(traced):
    off = profile_summary.summarize(traced[False][0])
    on = profile_summary.summarize(traced[True][0])
    assert off["python_events"] == 0
    assert off["events"] < 2_000  # far below the 1,000,000 events the JSON export is cut at
    assert on["python_events"] >= PY_CALLS  # every leaf() call
    assert on["events"] >= off["events"] + PY_CALLS
    assert _rows(on["scopes"], "scope").keys() >= {"judge/heads", "update/grad"}


def test_json_export_matches_xplane(traced):
    workdir, path = traced[False]
    exports = [p for p in os.listdir(os.path.dirname(path)) if p.endswith(".trace.json.gz")]
    assert exports, os.listdir(os.path.dirname(path))
    json_path = os.path.join(os.path.dirname(path), exports[0])
    with gzip.open(json_path, "rt") as fh:
        assert len(json.load(fh)["traceEvents"]) < 2_000
    a = profile_summary.summarize(path)
    b = profile_summary.summarize(json_path)
    assert b["source"] == "json" and b["device_events"] == a["device_events"]
    assert _rows(b["scopes"], "scope").keys() == _rows(a["scopes"], "scope").keys()
    for scope in ("judge/heads", "update/grad"):
        assert _rows(b["scopes"], "scope")[scope]["total_ms"] == pytest.approx(
            _rows(a["scopes"], "scope")[scope]["total_ms"], rel=1e-3)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rubric_jax.profile_summary", *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))


@pytest.mark.slow
def test_cli_table_and_json(traced, tmp_path):
    workdir, path = traced[False]
    out_json = tmp_path / "summary.json"
    r = _cli(workdir, "--json", str(out_json), "--ops", "3")
    assert r.returncode == 0, r.stderr
    table, top = r.stdout.split("\ntop 3 HLO ops:\n")
    assert len(top.splitlines()) == 3 and "jit(_step)/" in top
    lines = table.splitlines()
    assert any(l.split()[0] == "judge" for l in lines if l.strip())
    heads = [l for l in lines if l.strip().startswith("judge/heads")]
    assert len(heads) == 1 and float(heads[0].split()[2]) > 0  # scope, count, total ms, share
    assert any(l.strip().startswith("update/grad") for l in lines)
    assert lines[-1].split()[0] == "total" and lines[-1].split()[-1] == "100.0%"
    saved = json.loads(out_json.read_text())
    assert saved == json.loads(json.dumps(profile_summary.summarize(workdir)))
    # a direct trace path works as well, and --depth 1 folds scopes into phases
    r = _cli(path, "--json", "-", "--depth", "1")
    assert r.returncode == 0, r.stderr
    scopes = _rows(json.loads(r.stdout)["scopes"], "scope")
    assert {"judge", "update"} <= scopes.keys() and "judge/heads" not in scopes


@pytest.mark.slow
def test_cli_no_trace_is_a_clear_error(tmp_path):
    r = _cli(str(tmp_path))
    assert r.returncode == 2 and "no jax.profiler trace" in r.stderr and "profile_steps" in r.stderr
    with pytest.raises(profile_summary.TraceNotFoundError):
        profile_summary.find_trace(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(profile_summary.TraceNotFoundError):
        profile_summary.find_trace(tmp_path / "notes.txt")


def test_newest_run_is_chosen(tmp_path):
    for run, t in (("2020_01_01_00_00_00", 100), ("2020_01_01_00_00_05", 200)):
        d = tmp_path / "profile" / "plugins" / "profile" / run
        d.mkdir(parents=True)
        (d / "host.xplane.pb").write_bytes(b"")
        os.utime(d / "host.xplane.pb", (t, t))
    assert profile_summary.find_trace(tmp_path).endswith(os.path.join("2020_01_01_00_00_05", "host.xplane.pb"))


@pytest.mark.parametrize("op_name, depth, scope", [
    ("jit(step)/judge/heads/dot_general", None, "judge/heads"),
    ("jit(step)/jit(_judge)/judge/lanes/mul", None, "judge/lanes"),
    ("jit(step)/judge/heads/dot_general", 1, "judge"),
    ("jit(f)/sample/decode/while/body/closed_call/dot_general", None, "sample/decode"),
    ("jit(f)/sample/decode/cond/branch_1_fun/mul", None, "sample/decode"),
    ("jit(f)/update/grad/transpose(jvp(update))/grad/jvp()/checkpoint/rematted_computation/update/logprobs/"
     "vmap()/dot_general", None, "update/grad/logprobs"),
    ("jit(f)/add", None, ""),
    ("", None, ""),
])
def test_scope_of(op_name, depth, scope):
    assert profile_summary.scope_of(op_name, depth) == scope


def test_nested_ops_count_their_own_time_once():
    Op = profile_summary.DeviceOp
    line = ("/host:CPU", 1, "t")
    loop = Op("while.1", "m", 1, start_ps=0, dur_ps=100, line=line)
    body = [Op("dot.1", "m", 1, start_ps=10, dur_ps=30, line=line), Op("add.1", "m", 1, 50, 20, line)]
    other = Op("dot.2", "m", 1, start_ps=20, dur_ps=50, line=("/host:CPU", 2, "u"))  # another thread: overlaps
    after = Op("sin.1", "m", 1, start_ps=100, dur_ps=5, line=line)
    ops = [after, other, loop] + body
    profile_summary._self_times(ops)
    assert [o.self_ps for o in (loop, *body, other, after)] == [50, 30, 20, 50, 5]
