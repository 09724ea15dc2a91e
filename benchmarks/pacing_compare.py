"""Fixed against automatic curriculum pacing on the same run: when each criterion arrived, the held-out win
rates both pacings see, and what the readings cost.

The fixed side runs with reward.pacing="monitor": the fixed schedule (one criterion every `interval` steps)
decides, and the same held-out readings as auto pacing are taken and logged, so both sides have
pacing/heldout_win_rate at the same steps. Both runs start from the same seed and data.

    python benchmarks/pacing_compare.py --out=/tmp/pacing_cmp            # 30 steps each, :tiny, embedded SmolLM2
    python benchmarks/pacing_compare.py --out=/tmp/pacing_cmp --reuse     # only read finished workdirs

Runs `<out>/monitor` and `<out>/auto` one after the other (a finished workdir is resumed, i.e. left as it
is), then prints a Markdown table and writes `<out>/pacing_compare.json`:

  arrivals        steps at which criteria 2, 3, ... arrived (and the reason each time)
  criteria        active criteria at the last step
  readings        held-out readings taken (pacing/heldout_win_rate), their mean and the last one
  time/pacing     seconds spent on readings (greedy answers + verdicts) over the run, and its share of
                  the summed time/step
  wall            wall-clock seconds of the training command (machine-dependent)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("monitor", "auto")


def command(workdir: str, mode: str, args) -> list[str]:
    return [sys.executable, "-m", "rubric_jax.main", f"--config={args.config}", f"--workdir={workdir}",
            f"--config.steps={args.steps}", f"--config.reward.interval={args.interval}",
            f"--config.reward.pacing={mode}", f"--config.pacing.prompts={args.prompts}",
            f"--config.checkpoint.every={args.checkpoint_every}"]


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no metrics (run without --reuse, or check the run's log)")
    rows = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
            if "step" in d:
                rows[int(d["step"])] = d  # a resumed run rewrites steps after its checkpoint: keep the last
    return [rows[k] for k in sorted(rows)]


def summarize(rows: list[dict]) -> dict:
    """The comparison's figures from one run's metrics rows (pure: tested on hand-made rows)."""
    arrivals, readings = [], []
    for d in rows:
        reason = next((k.split("/", 1)[1][len("reason_"):] for k in d if k.startswith("pacing/reason_")), None)
        if d.get("pacing/arrived"):
            arrivals.append({"step": d["step"], "reason": reason, "criteria": int(d["pacing/active_criteria"]),
                             "arrival_win_rate": d.get("pacing/arrival_win_rate")})
        if "pacing/heldout_win_rate" in d:
            readings.append((d["step"], float(d["pacing/heldout_win_rate"])))
    t_pacing = sum(float(d.get("time/pacing", 0.0)) for d in rows)
    t_step = sum(float(d.get("time/step", 0.0)) for d in rows)
    spreads = {m: [float(d[f"judge/spread_{m}"]) for d in rows if f"judge/spread_{m}" in d]
               for m in ("logit", "sign", "hard")}
    return {
        "steps": len(rows),
        "arrivals": arrivals,
        "criteria": int(rows[-1]["pacing/active_criteria"]) if rows else 0,
        "readings": readings,
        "reading_mean": sum(w for _, w in readings) / len(readings) if readings else None,
        "reading_last": readings[-1][1] if readings else None,
        "reading_max": max(w for _, w in readings) if readings else None,
        "time_pacing_s": t_pacing,
        "time_step_s": t_step,
        "pacing_share": t_pacing / t_step if t_step else None,
        "spread_mean": {m: (sum(v) / len(v) if v else None) for m, v in spreads.items()},
    }


def _f(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def table(result: dict) -> str:
    lines = ["| pacing | steps | arrivals (step: reason) | criteria at end | readings | mean / max / last held-out "
             "win rate | time/pacing (s) | share of step time | wall (s) |",
             "|---|---:|---|---:|---:|---|---:|---:|---:|"]
    for mode, s in result["runs"].items():
        arr = ", ".join(f"{a['step']}: {a['reason']}" for a in s["arrivals"]) or "none"
        lines.append(f"| {'fixed (monitor)' if mode == 'monitor' else mode} | {s['steps']} | {arr} | {s['criteria']} | "
                     f"{len(s['readings'])} | {_f(s['reading_mean'])} / {_f(s['reading_max'])} / "
                     f"{_f(s['reading_last'])} | {s['time_pacing_s']:.0f} | {_f(s['pacing_share'], 2)} | "
                     f"{_f(s.get('wall_s'), 0)} |")
    lines += ["", "| pacing | in-group spread: logit | sign | hard |", "|---|---:|---:|---:|"]
    for mode, s in result["runs"].items():
        sp = s["spread_mean"]
        lines.append(f"| {mode} | {_f(sp['logit'], 4)} | {_f(sp['sign'], 4)} | {_f(sp['hard'], 4)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--config", default="configs/rcrl_auto_pacing.py:tiny")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--interval", type=int, default=5)
    p.add_argument("--prompts", type=int, default=4, help="held-out prompts")
    p.add_argument("--checkpoint_every", type=int, default=10)
    p.add_argument("--reuse", action="store_true", help="only read <out>/monitor and <out>/auto")
    args = p.parse_args(argv)
    if args.steps < 1 or args.interval < 1 or args.prompts < 1:
        p.error("--steps, --interval and --prompts must be >= 1")
    os.makedirs(args.out, exist_ok=True)
    result = {"settings": vars(args), "runs": {}}
    for mode in MODES:
        workdir = os.path.join(args.out, mode)
        wall = None
        if not args.reuse:
            cmd = command(workdir, mode, args)
            print("running:", " ".join(cmd), file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            with open(os.path.join(args.out, f"{mode}.log"), "a", encoding="utf-8") as log:
                rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            wall = time.perf_counter() - t0
            if rc != 0:
                print(f"{mode}: the training command failed (exit {rc}); see {args.out}/{mode}.log", file=sys.stderr)
                return 1
        s = summarize(read_metrics(workdir))
        s["wall_s"] = wall
        result["runs"][mode] = s
    text = table(result)
    print(text)
    with open(os.path.join(args.out, "pacing_compare.json"), "w", encoding="utf-8") as f:
        json.dump({**result, "table": text}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
