"""Are every config's :tiny metrics bit-identical at two revisions? The check a behaviour-preserving refactor owes.

For each configs/<name>.py present at both revisions, runs `python -m rubric_jax.main --config=configs/<name>.py:tiny`
in a clean worktree of each revision (`git worktree add --detach`), then compares every logged metric value
(metrics.jsonl, all steps) except the machine-dependent ones (names starting "time/", as the project names
them) and the wall-clock fields. A value is identical when its JSON text is; NaN equals NaN.

    python benchmarks/tiny_identity.py --before=REV [--after=HEAD] [--only=rcrl,rlmr] [--jobs=2] --out=DIR

Prints one row per config (values compared, values that differ, the first difference) and writes
DIR/tiny_identity.json. Runs of a revision are kept under DIR/<commit[:12]>/<name>, so a rerun only trains what is
missing. Each :tiny run takes 10-60 s on 2 cores; --jobs runs that many at once.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_KEYS = ("step", "wall", "timestamp", "elapsed")


def git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def configs_at(rev: str) -> set[str]:
    names = git("ls-tree", "--name-only", f"{rev}:configs").split()
    return {n[:-3] for n in names if n.endswith(".py") and not n.startswith("_")}


def worktree(rev: str, out: str) -> str:
    sha = git("rev-parse", rev)
    path = os.path.join(out, "trees", sha[:12])
    if not os.path.isdir(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        git("worktree", "add", "--detach", path, sha)
    return path


def train(tree: str, name: str, workdir: str) -> dict:
    done = os.path.join(workdir, "done.json")
    if os.path.exists(done):
        return json.load(open(done, encoding="utf-8"))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "rubric_jax.main", f"--config=configs/{name}.py:tiny",
                        f"--workdir={workdir}"], cwd=tree, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=tree))
    rec = {"returncode": p.returncode, "seconds": time.perf_counter() - t0, "stderr_tail": p.stderr[-2000:]}
    if p.returncode == 0:
        with open(done, "w", encoding="utf-8") as f:
            json.dump(rec, f)
    return rec


def metric_values(workdir: str) -> dict[str, str]:
    """(step, name) -> the value's JSON text, machine-dependent names left out."""
    out = {}
    path = os.path.join(workdir, "metrics.jsonl")
    for line in open(path, encoding="utf-8"):
        row = json.loads(line)
        step = row.get("step")
        for k, v in row.items():
            if k.startswith("time/") or k in SKIP_KEYS:
                continue
            if isinstance(v, float) and math.isnan(v):
                v = "nan"
            out[f"{step}:{k}"] = json.dumps(v)
    return out


def compare(a: dict[str, str], b: dict[str, str]) -> dict:
    keys = sorted(set(a) | set(b))
    diff = [k for k in keys if a.get(k) != b.get(k)]
    first = None
    if diff:
        k = diff[0]
        first = f"{k}: {a.get(k, 'missing')} -> {b.get(k, 'missing')}"
    return {"values": len(keys), "differ": len(diff), "first": first}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--only", default="", help="comma-separated config names (default: all in both revisions)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    names = sorted(configs_at(args.before) & configs_at(args.after))
    if args.only:
        want = args.only.split(",")
        unknown = [n for n in want if n not in names]
        if unknown:
            print(f"error: --only: {unknown} not in both revisions", file=sys.stderr)
            return 2
        names = want
    trees = {rev: worktree(rev, out) for rev in (args.before, args.after)}
    # Runs are kept per commit, not per name: a rerun after HEAD moves must not reuse the old HEAD's runs.
    keys = {rev: git("rev-parse", rev)[:12] for rev in (args.before, args.after)}
    jobs = [(rev, n) for n in names for rev in (args.before, args.after)]
    runs = {}
    with cf.ThreadPoolExecutor(max(1, args.jobs)) as ex:
        futs = {ex.submit(train, trees[rev], n, os.path.join(out, keys[rev], n)): (rev, n)
                for rev, n in jobs}
        for f in cf.as_completed(futs):
            runs[futs[f]] = f.result()
            rev, n = futs[f]
            print(f"  {n} @ {rev}: exit {runs[(rev, n)]['returncode']}, {runs[(rev, n)]['seconds']:.0f} s", flush=True)
    rows = {}
    for n in names:
        ra, rb = runs[(args.before, n)], runs[(args.after, n)]
        if ra["returncode"] or rb["returncode"]:
            rows[n] = {"error": f"exit {ra['returncode']} / {rb['returncode']}",
                       "stderr": (ra if ra["returncode"] else rb)["stderr_tail"][-400:]}
            continue
        rows[n] = compare(*(metric_values(os.path.join(out, keys[rev], n))
                            for rev in (args.before, args.after)))
    print("\n| config | values | differ | first difference |\n|---|---:|---:|---|")
    for n, r in rows.items():
        if "error" in r:
            print(f"| {n} | - | - | {r['error']} |")
        else:
            print(f"| {n} | {r['values']} | {r['differ']} | {r['first'] or ''} |")
    result = {"before": git("rev-parse", args.before), "after": git("rev-parse", args.after), "configs": rows}
    with open(os.path.join(out, "tiny_identity.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    same = sum(1 for r in rows.values() if r.get("differ") == 0)
    print(f"\n{same} of {len(rows)} configs bit-identical; {os.path.join(out, 'tiny_identity.json')}")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
