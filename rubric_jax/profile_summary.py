"""Device time per named scope and phase in a jax.profiler trace (what `--config.profile_steps=N` writes).

Usage:
    python -m rubric_jax.main --config=configs/rcrl.py:tiny --workdir=WORKDIR --config.profile_steps=1
                                                                       # traces step 1 into WORKDIR/profile
    python -m rubric_jax.profile_summary WORKDIR                       # newest trace under WORKDIR/profile
    python -m rubric_jax.profile_summary path/to/host.xplane.pb        # or one trace file (.trace.json.gz too)
    python -m rubric_jax.profile_summary WORKDIR --json summary.json --depth 2 --ops 10

It prints one table: each phase (the first component of a scope: judge, sample, update, ...) with its scopes
(full names, e.g. judge/heads) indented below, each with the number of device ops executed, their total device
time in ms and their share of all device time in the traced step; ops outside any named scope are "(unscoped)".
The header gives the trace file, the step's wall time, the device total and the number of trace events
(python_events counts the Python tracer's, 0 unless --config.profile_python=True). --ops N also lists the N
longest HLO ops with their op_name; --depth D cuts scopes to D components; --json PATH writes all of it.

Name the work inside jitted code with `jax.named_scope("judge/heads")` (or `rubric_jax.rl.profiling.scope`).
jax writes the scope into each HLO instruction's metadata op_name ("jit(step)/judge/heads/dot_general"); the
device ops in the trace carry only the HLO instruction ("hlo_op": "fusion.3") and module ("hlo_module":
"jit_step", "program_id"), so the scope comes from the HLO protos that jax.profiler stores in the trace's
"/host:metadata" plane. Hence the primary source is `<host>.xplane.pb`, read with a small protobuf
wire-format decoder (`rubric_jax.protowire`; no TensorFlow / xprof needed); it is also never cut at 1,000,000 events as the JSON
export is. A `.trace.json.gz` (Chrome/Perfetto JSON) is accepted too; its scopes come from the `.xplane.pb`
beside it when there is one (else only op names, all unscoped).

Scope names are cleaned: the jit(...) / jvp(...) / transpose(...) / vmap(...) wrappers, control-flow markers
(while, body, cond, branch_0_fun, closed_call, checkpoint, ...) and segments repeated by autodiff are dropped,
and the last segment (the primitive) is removed: "jit(step)/update/grad/transpose(jvp(update))/grad/jvp()/
update/logprobs/dot_general" -> "update/grad/logprobs".

Which events are device ops: on CPU the XLA CPU executor's per-thunk events on "/host:CPU" (they carry
hlo_op); on GPU/TPU the events with hlo_op on "/device:..." planes (Stream lines when present) and none of the
host-side launch events. Ops nested in another op on the same thread (a while loop's body ops inside the while
thunk on CPU) count only their own time, so nothing is counted twice; ops running at the same time on
different threads or streams each count in full, so device time can exceed wall time. A fusion counts under
the op_name XLA gave it (its root op's), so work fused across two scopes lands in one of them; ops XLA made
itself (copies, some reduce-windows) have no op_name and are unscoped. Checked on jax 0.10.2's CPU traces; the
GPU/TPU plane layout follows xprof's conventions and has not been checked here.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import gzip
import json
import os
import re
import sys
from typing import Optional

from rubric_jax.protowire import event as _event, fields as _fields, packed as _packed, stat as _stat, text as _str

__all__ = ["find_trace", "read_trace", "scope_of", "summarize", "format_table", "main", "TraceNotFoundError"]

PROFILE_SUBDIR = "profile"  # same as rubric_jax.rl.profiling.PROFILE_SUBDIR (not imported: that pulls in jax)
UNSCOPED = "(unscoped)"


class TraceNotFoundError(FileNotFoundError):
    pass


# ----------------------------------------------------------------------------------------------------------------
# HLO protos -> {instruction name: op_name}

def _hlo_op_names(hlo_proto) -> tuple[str, dict[str, str]]:
    """HloProto.hlo_module=1 -> HloModuleProto(name=1, computations=3 -> (name=1, id=5, instructions=2 ->
    (name=1, metadata=7 -> OpMetadata(op_name=2), called_computation_ids=38)))."""
    module_name, computations = "", {}
    instructions = []  # (name, op_name, called ids)
    for f, module in _fields(hlo_proto):
        if f != 1:
            continue
        for mf, mv in _fields(module):
            if mf == 1:
                module_name = _str(mv)
            elif mf == 3:
                comp_id, members = None, []
                for cf, cv in _fields(mv):
                    if cf == 5:
                        comp_id = cv
                    elif cf == 2:
                        name, op_name, called = "", "", []
                        for inf, iv in _fields(cv):
                            if inf == 1:
                                name = _str(iv)
                            elif inf == 7:
                                for of, ov in _fields(iv):
                                    if of == 2:
                                        op_name = _str(ov)
                            elif inf == 38:
                                called.extend(_packed(iv))
                        instructions.append((name, op_name, called))
                        members.append(op_name)
                computations[comp_id] = members
    ops = {}
    for name, op_name, called in instructions:
        if not op_name and called:  # e.g. a fusion without metadata: the most common scope of what it calls
            inner = [o for c in called for o in computations.get(c, ()) if o]
            if inner:
                by_scope = collections.Counter(scope_of(o) for o in inner)
                best = by_scope.most_common(1)[0][0]
                op_name = next(o for o in inner if scope_of(o) == best)
        ops[name] = op_name
    return module_name, ops


# ----------------------------------------------------------------------------------------------------------------
# op_name -> scope

_WRAPPER = re.compile(r"^[\w.\-]*\(.*\)$")  # jit(f), pjit(f), jvp(), transpose(jvp(update)), vmap()
_MARKERS = frozenset({
    "while", "body", "cond", "closed_call", "core_call", "call", "checkpoint", "remat", "remat2",
    "rematted_computation", "scan", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "shard_map",
    "pjit", "jit", "xla_call", "xla_pmap", "pmap", "remat_call", "run_state", "for_loop", "switch"})
_BRANCH = re.compile(r"^branch_\d+_fun$")


def _split_top(op_name: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in op_name:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "/" and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p]


def scope_of(op_name: str, depth: Optional[int] = None) -> str:
    """The named-scope path of an HLO op_name ("" when there is none), at most `depth` components."""
    parts = _split_top(op_name or "")[:-1]  # the last component is the primitive
    out, seen = [], set()
    for p in parts:
        if _WRAPPER.match(p) or p in _MARKERS or _BRANCH.match(p) or p in seen:
            continue
        seen.add(p)
        out.append(p)
    if depth:
        out = out[:depth]
    return "/".join(out)


# ----------------------------------------------------------------------------------------------------------------
# reading traces

@dataclasses.dataclass
class DeviceOp:
    hlo_op: str
    module: str
    program_id: Optional[int]
    start_ps: int
    dur_ps: int
    line: tuple  # (plane, line id): ops on one line nest, ops on different lines overlap
    self_ps: int = 0


@dataclasses.dataclass
class TraceData:
    path: str
    source: str  # "xplane" | "json"
    events: int = 0  # all timed events (every plane)
    python_events: int = 0  # the Python tracer's ("$file.py:line fn")
    steps: list = dataclasses.field(default_factory=list)  # [(step_num, dur_ps)] of StepTraceAnnotations
    span_ps: int = 0  # first event start to last event end
    ops: list = dataclasses.field(default_factory=list)  # DeviceOp
    hlo_by_program: dict = dataclasses.field(default_factory=dict)  # program_id -> {hlo_op: op_name}
    hlo_by_module: dict = dataclasses.field(default_factory=dict)  # module name -> {hlo_op: op_name}

    def op_name(self, op: DeviceOp) -> str:
        table = self.hlo_by_program.get(op.program_id) if op.program_id is not None else None
        if table is None or op.hlo_op not in table:
            table = self.hlo_by_module.get(op.module, {})
        return table.get(op.hlo_op, "")


def _is_device_plane(name: str) -> bool:
    return name.startswith("/device:") and not name.startswith("/device:CPU")


def _select_device_ops(ops_by_plane: dict[str, dict[object, list[DeviceOp]]]) -> list[DeviceOp]:
    """Device planes (GPU/TPU) when they hold ops, else the host's (XLA CPU). On a device plane, Stream lines
    when there are any (skips derived "XLA Ops"/"XLA Modules" lines); never "XLA Modules" (whole programs)."""
    device = {p: lines for p, lines in ops_by_plane.items() if _is_device_plane(p) and any(lines.values())}
    chosen = device or {p: lines for p, lines in ops_by_plane.items() if not _is_device_plane(p)}
    out = []
    for plane, lines in chosen.items():
        streams = {k: v for k, v in lines.items() if str(k[1]).startswith("Stream")}
        for key, ops in (streams or lines).items():
            if key[1] != "XLA Modules":
                out.extend(ops)
    return out


def _self_times(ops: list[DeviceOp]) -> None:
    """self_ps = dur_ps minus the ops nested inside it on the same line."""
    by_line = collections.defaultdict(list)
    for op in ops:
        op.self_ps = op.dur_ps
        by_line[op.line].append(op)
    for line_ops in by_line.values():
        line_ops.sort(key=lambda o: (o.start_ps, -o.dur_ps))
        stack: list[DeviceOp] = []
        for op in line_ops:
            end = op.start_ps + op.dur_ps
            while stack and stack[-1].start_ps + stack[-1].dur_ps <= op.start_ps:
                stack.pop()
            if stack and end <= stack[-1].start_ps + stack[-1].dur_ps:
                stack[-1].self_ps -= op.dur_ps
            stack.append(op)
    for op in ops:
        op.self_ps = max(0, op.self_ps)


def _stat_metadata(entries) -> dict:
    """One XPlane stat_metadata map entry list: {stat id: stat name}."""
    out = {}
    for kf, kv in _fields(entries):
        if kf == 2:
            d = dict(_fields(kv))
            out[d.get(1, 0)] = _str(d.get(2, b""))
    return out


def _read_metadata_plane(plane_fields, data: TraceData) -> None:
    """/host:metadata: one event metadata per compiled program, with stats "Hlo Proto" and "program_id"."""
    stat_names, event_mds = {}, []
    for f, v in plane_fields:
        if f == 5:
            stat_names.update(_stat_metadata(v))
        elif f == 4:
            for kf, kv in _fields(v):
                if kf == 2:
                    event_mds.append(kv)
    for md in event_mds:
        hlo, program_id = None, None
        for f, v in _fields(md):
            if f == 5:
                name, value = _stat(v, stat_names)
                if name == "Hlo Proto":
                    hlo = value
                elif name == "program_id":
                    program_id = value
        if hlo is None:
            continue
        module, ops = _hlo_op_names(hlo)
        if program_id is not None:
            data.hlo_by_program[int(program_id)] = ops
        data.hlo_by_module.setdefault(module, {}).update({k: v for k, v in ops.items()
                                                         if k not in data.hlo_by_module.get(module, {})})


def read_xplane(path: str, events: bool = True) -> TraceData:
    """Reads a `<host>.xplane.pb` (tsl.profiler.XSpace). `events=False` reads only the HLO metadata."""
    with open(path, "rb") as fh:
        buf = memoryview(fh.read())
    data = TraceData(path=path, source="xplane")
    ops_by_plane: dict[str, dict] = {}
    first, last = None, None
    for f, plane in _fields(buf):  # XSpace.planes=1
        if f != 1:
            continue
        # XPlane: id=1, name=2, lines=3, event_metadata=4 (map), stat_metadata=5 (map), stats=6
        plane_fields = list(_fields(plane))
        name = next((_str(v) for pf, v in plane_fields if pf == 2), "")
        if name == "/host:metadata":
            _read_metadata_plane(plane_fields, data)
            continue
        if not events:
            continue
        stat_names, event_names, event_stats = {}, {}, {}
        for pf, v in plane_fields:
            if pf == 5:
                stat_names.update(_stat_metadata(v))
            elif pf == 4:
                for kf, kv in _fields(v):
                    if kf == 2:
                        mid, mname, mstats = 0, "", []
                        for mf, mv in _fields(kv):
                            if mf == 1:
                                mid = mv
                            elif mf == 2:
                                mname = _str(mv)
                            elif mf == 5:
                                mstats.append(mv)
                        event_names[mid] = mname
                        if mstats:
                            event_stats[mid] = mstats
        lines = ops_by_plane.setdefault(name, {})
        for pf, line in plane_fields:
            if pf != 3:
                continue
            # XLine: id=1, name=2, timestamp_ns=3, events=4, display_name=11
            line_id, line_name, t0_ns, raw_events = 0, "", 0, []
            for lf, lv in _fields(line):
                if lf == 1:
                    line_id = lv
                elif lf == 2:
                    line_name = _str(lv)
                elif lf == 3:
                    t0_ns = lv
                elif lf == 4:
                    raw_events.append(lv)
            key = (line_id, line_name)
            t0_ps = t0_ns * 1000
            for mid, offset, dur, stats in map(_event, raw_events):
                data.events += 1
                ev_name = event_names.get(mid, "")
                if ev_name.startswith("$"):
                    data.python_events += 1
                start = t0_ps + offset
                if first is None or start < first:
                    first = start
                if last is None or start + dur > last:
                    last = start + dur
                if not stats and mid not in event_stats:
                    continue
                st = dict(_stat(s, stat_names) for s in event_stats.get(mid, ()))
                st.update(_stat(s, stat_names) for s in stats)
                if "step_num" in st:
                    data.steps.append((st["step_num"], dur))
                hlo_op = st.get("hlo_op")
                if hlo_op:
                    pid = st.get("program_id")
                    lines.setdefault(key, []).append(DeviceOp(
                        hlo_op=str(hlo_op), module=str(st.get("hlo_module", "")),
                        program_id=int(pid) if isinstance(pid, int) else None, start_ps=start, dur_ps=dur,
                        line=(name,) + key))
    data.span_ps = (last - first) if first is not None else 0
    data.ops = _select_device_ops(ops_by_plane)
    _self_times(data.ops)
    return data


def read_trace_json(path: str) -> TraceData:
    """Reads a Chrome/Perfetto trace (`.trace.json.gz`, `.json.gz`, `.json`); HLO metadata from the
    `.xplane.pb` in the same folder, if any."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    raw = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    data = TraceData(path=path, source="json")
    planes, threads = {}, {}
    for e in raw:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            planes[e.get("pid")] = str(e.get("args", {}).get("name", e.get("pid")))
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", e.get("tid")))
    ops_by_plane: dict[str, dict] = {}
    first, last = None, None
    for e in raw:
        if e.get("ph") != "X":
            continue
        data.events += 1
        name = str(e.get("name", ""))
        if name.startswith("$"):
            data.python_events += 1
        start, dur = int(round(float(e.get("ts", 0)) * 1e6)), int(round(float(e.get("dur", 0)) * 1e6))  # us -> ps
        first = start if first is None else min(first, start)
        last = start + dur if last is None else max(last, start + dur)
        args = e.get("args") or {}
        if "step_num" in args:
            data.steps.append((args["step_num"], dur))
        if args.get("hlo_op"):
            plane = planes.get(e.get("pid"), str(e.get("pid")))
            key = (e.get("tid"), threads.get((e.get("pid"), e.get("tid")), str(e.get("tid"))))
            pid = args.get("program_id")
            ops_by_plane.setdefault(plane, {}).setdefault(key, []).append(DeviceOp(
                hlo_op=str(args["hlo_op"]), module=str(args.get("hlo_module", "")),
                program_id=int(pid) if str(pid).lstrip("-").isdigit() else None, start_ps=start, dur_ps=dur,
                line=(plane,) + key))
    data.span_ps = (last - first) if first is not None else 0
    data.ops = _select_device_ops(ops_by_plane)
    _self_times(data.ops)
    siblings = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(path)), "*.xplane.pb")))
    if siblings:
        meta = read_xplane(siblings[0], events=False)
        data.hlo_by_program, data.hlo_by_module = meta.hlo_by_program, meta.hlo_by_module
    return data


def _is_trace_file(path: str) -> bool:
    return path.endswith((".xplane.pb", ".trace.json.gz", ".json.gz", ".json"))


def find_trace(path: str | os.PathLike) -> str:
    """A trace file: `path` itself, or the newest run's `.xplane.pb` (else `.trace.json.gz`) found under
    `path/profile/plugins/profile/<run>/`, `path/plugins/profile/<run>/` or `path/` (a run folder)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        if not _is_trace_file(path):
            raise TraceNotFoundError(f"{path} is not a trace (expected a .xplane.pb or a .trace.json.gz)")
        return path
    if not os.path.isdir(path):
        raise TraceNotFoundError(f"no such workdir or trace file: {path}")
    candidates = []
    for pattern in (os.path.join(path, PROFILE_SUBDIR, "plugins", "profile", "*"),
                    os.path.join(path, "plugins", "profile", "*"), path):
        for run in glob.glob(pattern):
            files = sorted(glob.glob(os.path.join(run, "*.xplane.pb"))) or \
                sorted(glob.glob(os.path.join(run, "*.trace.json.gz")))
            candidates.extend(files)
        if candidates:
            break
    if not candidates:
        raise TraceNotFoundError(
            f"no jax.profiler trace under {path} (looked for {PROFILE_SUBDIR}/plugins/profile/<run>/<host>.xplane.pb "
            f"or .trace.json.gz); trace a step with --config.profile_steps=N")
    return max(candidates, key=lambda p: (os.path.getmtime(p), os.path.basename(os.path.dirname(p)), p))


def read_trace(path: str | os.PathLike) -> TraceData:
    trace = find_trace(path)
    return read_xplane(trace) if trace.endswith(".xplane.pb") else read_trace_json(trace)


# ----------------------------------------------------------------------------------------------------------------
# summary

def summarize(path: str | os.PathLike | TraceData, depth: Optional[int] = None, top_ops: int = 20) -> dict:
    """Device time per phase and per scope of the newest trace under a workdir (or of one trace file).

    Returns {"trace", "source", "events", "python_events", "device_events", "device_ms", "step_ms", "steps",
    "span_ms", "phases": [{"phase", "count", "total_ms", "share"}], "scopes": [{"scope", "phase", "count",
    "total_ms", "share"}], "ops": [{"hlo_op", "module", "op_name", "scope", "count", "total_ms", "share"}]}
    (the `top_ops` longest HLO ops); share is the fraction of device_ms; rows are sorted longest first.
    """
    data = path if isinstance(path, TraceData) else read_trace(path)
    per_scope = collections.defaultdict(lambda: [0, 0])  # scope -> [count, ps]
    per_op = collections.defaultdict(lambda: [0, 0])  # (module, hlo_op, op_name, scope) -> [count, ps]
    unresolved = 0
    for op in data.ops:
        op_name = data.op_name(op)
        if not op_name:
            unresolved += 1
        scope = scope_of(op_name, depth) or UNSCOPED
        per_scope[scope][0] += 1
        per_scope[scope][1] += op.self_ps
        per_op[(op.module, op.hlo_op, op_name, scope)][0] += 1
        per_op[(op.module, op.hlo_op, op_name, scope)][1] += op.self_ps
    total_ps = sum(ps for _, ps in per_scope.values())
    per_phase = collections.defaultdict(lambda: [0, 0])
    for scope, (count, ps) in per_scope.items():
        phase = scope.split("/")[0] if scope != UNSCOPED else UNSCOPED
        per_phase[phase][0] += count
        per_phase[phase][1] += ps

    def share(ps):
        return ps / total_ps if total_ps else 0.0

    def order(item):
        return (item[0] == UNSCOPED, -item[1][1], item[0])

    phases = [dict(phase=p, count=c, total_ms=ps / 1e9, share=share(ps)) for p, (c, ps) in
              sorted(per_phase.items(), key=order)]
    scopes = [dict(scope=s, phase=s.split("/")[0] if s != UNSCOPED else UNSCOPED, count=c, total_ms=ps / 1e9,
                   share=share(ps)) for s, (c, ps) in sorted(per_scope.items(), key=order)]
    ops = [dict(hlo_op=k[1], module=k[0], op_name=k[2], scope=k[3], count=c, total_ms=ps / 1e9, share=share(ps))
           for k, (c, ps) in sorted(per_op.items(), key=lambda kv: (-kv[1][1], kv[0]))[:max(0, top_ops)]]
    return dict(trace=os.path.abspath(data.path), source=data.source, events=data.events,
                python_events=data.python_events, device_events=len(data.ops), unresolved_ops=unresolved,
                device_ms=total_ps / 1e9, steps=[s for s, _ in data.steps],
                step_ms=sum(d for _, d in data.steps) / 1e9 if data.steps else None,
                span_ms=data.span_ps / 1e9, phases=phases, scopes=scopes, ops=ops)


def format_table(summary: dict, ops: int = 0) -> str:
    """The summary as a text table; `ops` > 0 appends that many of the longest HLO ops."""
    s = summary
    wall = (f"step {','.join(str(x) for x in s['steps'])} wall {s['step_ms']:.3f} ms" if s["step_ms"] is not None
            else f"trace span {s['span_ms']:.3f} ms (no step annotation)")
    lines = [f"trace: {s['trace']}",
             f"{wall}; device {s['device_ms']:.3f} ms in {s['device_events']} ops; {s['events']} trace events "
             f"({s['python_events']} from the Python tracer)"]
    if s["device_events"] and s["unresolved_ops"] == s["device_events"]:
        lines.append("note: no HLO metadata found for the device ops (no .xplane.pb?): all are unscoped")
    width = max([len("phase / scope")] + [len(r["phase"]) for r in s["phases"]] +
                [len(r["scope"]) + 2 for r in s["scopes"]])
    header = f"{'phase / scope':<{width}}  {'count':>7}  {'total ms':>10}  {'share':>6}"
    lines += [header, "-" * len(header)]

    def row(label, r):
        return f"{label:<{width}}  {r['count']:>7d}  {r['total_ms']:>10.3f}  {100 * r['share']:>5.1f}%"

    for ph in s["phases"]:
        lines.append(row(ph["phase"], ph))
        subs = [sc for sc in s["scopes"] if sc["phase"] == ph["phase"]]
        if [sc["scope"] for sc in subs] != [ph["phase"]]:  # (ops directly in the phase get a row of their own)
            lines.extend(row("  " + sc["scope"], sc) for sc in subs)
    lines.append("-" * len(header))
    lines.append(row("total", dict(count=s["device_events"], total_ms=s["device_ms"],
                                   share=1.0 if s["device_events"] else 0.0)))
    if ops and s.get("ops"):
        lines += ["", f"top {min(ops, len(s['ops']))} HLO ops:"]
        for o in s["ops"][:ops]:
            lines.append(f"  {o['total_ms']:>10.3f} ms  {100 * o['share']:>5.1f}%  x{o['count']:<5d} "
                         f"{o['module']}/{o['hlo_op']}  {o['op_name'] or '-'}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rubric_jax.profile_summary", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a workdir (its newest trace under profile/) or a .xplane.pb / .trace.json.gz")
    parser.add_argument("--json", metavar="PATH", help="also write the summary as JSON to PATH ('-' = stdout)")
    parser.add_argument("--depth", type=int, default=None, help="keep at most this many scope components")
    parser.add_argument("--ops", type=int, default=0, metavar="N", help="also list the N longest HLO ops")
    args = parser.parse_args(argv)
    try:
        summary = summarize(args.path, depth=args.depth, top_ops=max(20, args.ops))
    except TraceNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json == "-":
        json.dump(summary, sys.stdout, indent=2)
        print()
        return 0
    print(format_table(summary, ops=args.ops))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
