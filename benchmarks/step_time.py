"""Wall time per training step of a config, for this checkout and for other source trees (e.g. a git worktree of
an older commit), run alternately in the same session so machine load hits all of them alike.

  git worktree add /tmp/before <commit>
  python benchmarks/step_time.py --trees=before=/tmp/before,after=. --config=configs/rcrl.py:tiny --steps=4 \
      --repeats=2 --out=/tmp/step_time.json

Each run is `python -m rubric_jax.main` in a fresh workdir; the table reports, per tree, the mean over runs of
the mean `time/step` and `time/save` of steps 1.. (step 0 compiles), the wall time of the whole command (start-up
to exit, which includes model loading, compilation and the final wait for checkpoint writes), and each tree's
ratio to the first tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def run_once(tree: str, config: str, steps: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="step_time_") as wd:
        cmd = [sys.executable, "-m", "rubric_jax.main", f"--config={config}", f"--workdir={wd}",
               f"--config.steps={steps}", "--config.compilation_cache_dir=none", *extra]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=tree, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.abspath(tree)))
        wall = time.perf_counter() - t0
        if p.returncode:
            raise RuntimeError(f"{tree}: {' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
        with open(os.path.join(wd, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    later = [r for r in rows if r["step"] >= 1] or rows
    return {"step_s": float(np.mean([r["time/step"] for r in later])),
            "save_s": float(np.mean([r.get("time/save", 0.0) for r in later])), "wall_s": wall}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", required=True, help="name=path,name=path (source trees, run from their roots)")
    ap.add_argument("--config", default="configs/rcrl.py:tiny")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("extra", nargs="*", help="more --config.x=y overrides for every run")
    args = ap.parse_args(argv)
    trees = [tuple(part.split("=", 1)) for part in args.trees.split(",")]
    runs: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for r in range(args.repeats):
        for name, path in trees:
            res = run_once(path, args.config, args.steps, args.extra)
            runs[name].append(res)
            print(f"repeat {r} {name}: {res}", file=sys.stderr, flush=True)
    first = trees[0][0]
    mean = {n: {k: float(np.mean([x[k] for x in rs])) for k in ("step_s", "save_s", "wall_s")} for n, rs in runs.items()}
    print(f"| tree | time/step (s) | time/save (s) | command wall (s) | step ratio to {first} |")
    print("|---|---:|---:|---:|---:|")
    for n, m in mean.items():
        print(f"| {n} | {m['step_s']:.2f} | {m['save_s']:.3f} | {m['wall_s']:.1f} | "
              f"{m['step_s'] / mean[first]['step_s']:.3f} |")
    result = {"config": args.config, "steps": args.steps, "repeats": args.repeats, "runs": runs, "mean": mean}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
