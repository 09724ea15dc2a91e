"""vs_shuffled: does each evaluation suite rank a model above its own word-shuffled copy under a given judge?

A suite whose judge cannot tell a model's answers from the same answers with their words shuffled
(`shuffled:<spec>`, evals.models) measures nothing; this command runs every suite once on that pair and says
for each whether the ranking holds, with an interval, so a judge is checked before its ratings of real
contestants are read. gv_gap has no second contestant: it reports how often the judge tells the model's own
answers from their degraded copies (verification accuracy, chance 1/2).

    python -m evals.vs_shuffled --judge=qwen2.5-coder-1.5b-instruct --out=/tmp/vs_shuffled
        [--model=smollm2-135m-instruct] [--suites=pairwise_elo,health] [--judge_questions=both]

Each suite runs through `evals.run` with the settings of SETTINGS (sized for a 2-core CPU and a 1.5B judge:
small samples, short answers; the flags are printed) into --out/<suite>/, sharing one answer and verdict
cache (--cache_dir). What is compared, per suite (m: the model, s: its shuffled copy):

  pairwise_elo   win rate of m over s (both orders of every pair), prompt-clustered bootstrap interval;
  rubric_score   pointwise: mean rubric score (0-20) of m minus that of s, per answer, paired bootstrap
                 interval; pairwise: margin-weighted win rate of m over s, prompt-clustered interval;
  elements       mean story score (0-10), m minus s, paired bootstrap over stories;
  health         HealthBench-style score (0-1), m minus s, paired bootstrap over examples;
  fixed_rubric   pointwise: overall fixed-metric score (0-100), m minus s, paired bootstrap over scripts;
                 pairwise: the blind validation's preference for m, stratified bootstrap;
  gv_gap         verification accuracy on (answer, degraded copy) pairs and its bootstrap interval.

"holds" is the point estimate on the right side (win rate above 1/2, difference above 0, accuracy above
1/2); "sure" adds that the whole 95% interval is. Writes vs_shuffled.json and vs_shuffled.md into --out;
exit status 0 when every suite holds, 1 when one does not, 2 on bad input or a failed suite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from evals.report import write_json

SUITES = ("pairwise_elo", "rubric_score", "elements", "health", "fixed_rubric", "gv_gap")
PAIRWISE = ("pairwise_elo", "rubric_score", "fixed_rubric", "gv_gap")  # they ask --judge_questions
# Per-suite flags: what a 2-core CPU affords with a 1.5B judge (a few minutes a suite), read digit by digit
# where a scale runs past 9 (evals.scorers, logit mode).
SETTINGS = {
    "pairwise_elo": ["--prompts=8", "--max_new_tokens=96"],
    "rubric_score": ["--prompts=4", "--modifiers=1", "--max_new_tokens=96", "--score_mode=logit"],
    "elements": ["--stories=4", "--elements=3", "--min_words=60", "--max_words=150", "--max_new_tokens=128",
                 "--score_mode=logit"],
    "health": ["--prompts=8", "--max_new_tokens=128"],
    "fixed_rubric": ["--prompts=6", "--max_new_tokens=160"],
    "gv_gap": ["--prompts=4", "--samples=3", "--max_new_tokens=96"],
}
LEVEL = 0.95


def paired_difference(a, b, *, reps: int = 2000, seed: int = 0, level: float = LEVEL) -> dict:
    """Mean of a_i - b_i over the items both score (NaN/None skipped) and its percentile bootstrap interval,
    resampling items with both scores kept together."""
    a, b = (np.asarray([np.nan if x is None else x for x in v], np.float64) for v in (a, b))
    if a.shape != b.shape:
        raise ValueError(f"paired_difference: {a.size} against {b.size} items")
    d = (a - b)[np.isfinite(a) & np.isfinite(b)]
    if not d.size:
        return {"estimate": None, "lo": None, "hi": None, "n": 0}
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, d.size, (reps, d.size))].mean(axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return {"estimate": float(d.mean()), "lo": float(lo), "hi": float(hi), "n": int(d.size)}


def _row(suite, measure, model, shuffled, est, lo, hi, n, null, part=""):
    return {"suite": suite, "part": part, "measure": measure, "model": model, "shuffled": shuffled, "estimate": est, "lo": lo,
            "hi": hi, "n": n, "null": null, "holds": est is not None and est > null,
            "sure": lo is not None and lo > null}


def _win_rate_row(suite, ratings: dict, n: int, measure: str, part: str = "") -> dict:
    """A row from an evals.bradley_terry.rate result: m's win rate over s and its interval, with their ratings."""
    wr = ratings["win_rate"]
    i, j = wr["names"].index("model"), wr["names"].index("shuffled")
    elo = {m["name"]: m["elo"] for m in ratings["models"]}
    return _row(suite, measure, elo["model"], elo["shuffled"], wr["matrix"][i][j], wr["lo"][i][j], wr["hi"][i][j],
                n, 0.5, part)


def summarise(suite: str, res: dict, reps: int, seed: int) -> list[dict]:
    """The table's rows for one suite from its results.json (contestants named "model" and "shuffled"): one,
    or two for the suites with a pointwise and a pairwise part."""
    if suite == "pairwise_elo":
        return [_win_rate_row(suite, res, res["eval"]["prompts"], "win rate of model over shuffled (Elo beside)")]
    if suite == "gv_gap":
        vk = res["verification_known"]
        return [_row(suite, "verification accuracy (answer vs its degraded copy)", None, None, vk["estimate"],
                     vk["lo"], vk["hi"], vk["pairs"], 0.5)]
    extra = []
    if suite == "rubric_score":
        by = {m["name"]: m for m in res["rubric"]["models"]}
        a, b, measure, key = by["model"]["per_answer"], by["shuffled"]["per_answer"], "rubric score (0-20)", "score_20"
        extra = [_win_rate_row(suite, res["pairwise"], len(a), "margin-weighted win rate of model over shuffled "
                               "(Elo beside)", "pairwise")]
    elif suite == "elements":
        by = {m["name"]: m for m in res["models"]}
        a, b, measure, key = by["model"]["per_story"], by["shuffled"]["per_story"], "story score (0-10)", "score"
    elif suite == "health":
        a = [e["scores"]["model"] for e in res["examples"]]
        b = [e["scores"]["shuffled"] for e in res["examples"]]
        by = {n: {"score": m["overall"]["mean"]} for n, m in res["models"].items()}
        measure, key = "health score (0-1)", "score"
    elif suite == "fixed_rubric":
        a, b = (res["models"][n]["per_script"]["overall"] for n in ("model", "shuffled"))
        by = {n: {"score": m["macro"]["overall"]} for n, m in res["models"].items()}
        measure, key = "fixed-metric score (0-100)", "score"
        pw = res["pairwise"]
        if (pw["a"], pw["b"]) != ("model", "shuffled"):
            raise ValueError(f"vs_shuffled: fixed_rubric compared {pw['a']} with {pw['b']}")
        extra = [_row(suite, "blind preference for model", None, None, pw["preference"], pw["lo"], pw["hi"], pw["n"],
                      0.5, "pairwise")]
    else:
        raise ValueError(f"vs_shuffled: no summary for suite {suite!r}")
    d = paired_difference(a, b, reps=reps, seed=seed)
    return [_row(suite, measure + ", model - shuffled", by["model"][key], by["shuffled"][key], d["estimate"],
                 d["lo"], d["hi"], d["n"], 0.0, "pointwise" if extra else "")] + extra


def _f(x, nd=3):
    return "-" if x is None else f"{x:.{0 if abs(x) >= 100 else nd}f}"


def format_table(rows: list[dict], title: str) -> str:
    lines = [f"# {title}", "", "| suite | measure | model | shuffled | estimate | 95% interval | n | holds | seconds |",
             "|---|---|---:|---:|---:|---|---:|---|---:|"]
    for r in rows:
        secs = f"{r['seconds']:.0f}" if "seconds" in r else "-"
        if "error" in r:
            lines.append(f"| {r['suite']} | failed: {r['error']} | | | | | | no | {secs} |")
            continue
        verdict = "yes, interval too" if r["sure"] else ("yes" if r["holds"] else "**no**")
        name = f"{r['suite']} ({r['part']})" if r.get("part") else r["suite"]
        lines.append(f"| {name} | {r['measure']} | {_f(r['model'])} | {_f(r['shuffled'])} | "
                     f"{_f(r['estimate'])} | [{_f(r['lo'])}, {_f(r['hi'])}] | {r['n']} | {verdict} | {secs} |")
    return "\n".join(lines) + "\n"


def suite_argv(suite: str, args) -> list[str]:
    argv = [f"--suite={suite}", f"--judge={args.judge}", f"--out={os.path.join(args.out, suite)}",
            f"--cache_dir={args.cache_dir}", f"--seed={args.seed}", f"--bootstrap={args.bootstrap}", "--quiet",
            *SETTINGS[suite]]
    if suite == "gv_gap":
        argv.append(f"--models=model={args.model}")
    else:
        argv.append(f"--models=model={args.model},shuffled=shuffled:{args.model}")
    if suite in PAIRWISE:
        argv.append(f"--judge_questions={args.judge_questions}")
    return argv


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.vs_shuffled", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judge", required=True, help="judge spec (as evals.run --judge)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="the model whose shuffled copy it must beat")
    p.add_argument("--out", required=True)
    p.add_argument("--suites", default=",".join(SUITES), help="comma-separated, from " + ", ".join(SUITES))
    p.add_argument("--judge_questions", default="both", choices=("better", "worse", "both"),
                   help="the pairwise question (evals.run --judge_questions; both: the 1.5B's reading)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--cache_dir", default=os.environ.get("RUBRIC_JAX_EVAL_CACHE", "~/.cache/rubric_jax/evals"))
    args = p.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    bad = [s for s in suites if s not in SUITES]
    if bad or not suites:
        print(f"error: --suites: unknown {bad} (choose from {', '.join(SUITES)})", file=sys.stderr)
        return 2
    from evals.run import main as run_main

    os.makedirs(args.out, exist_ok=True)
    rows, failed = [], False
    for suite in suites:
        argv_s = suite_argv(suite, args)
        print(f"vs_shuffled: {suite}: python -m evals.run {' '.join(argv_s)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rc = run_main(argv_s)
        took = time.perf_counter() - t0
        if rc != 0:
            rows.append({"suite": suite, "error": f"evals.run exited {rc}", "seconds": took})
            failed = True
            continue
        with open(os.path.join(args.out, suite, "results.json"), encoding="utf-8") as f:
            got = summarise(suite, json.load(f), args.bootstrap, args.seed)
        for row in got:
            rows.append({**row, "seconds": took, "argv": argv_s})
            print(f"vs_shuffled: {suite}{' ' + row['part'] if row['part'] else ''}: {_f(row['estimate'])} "
                  f"[{_f(row['lo'])}, {_f(row['hi'])}] ({'holds' if row['holds'] else 'does not hold'}; "
                  f"{took:.0f} s)", file=sys.stderr, flush=True)
    title = f"{args.model} against its word-shuffled copy, judged by {args.judge}"
    table = format_table(rows, title)
    with open(os.path.join(args.out, "vs_shuffled.md"), "w", encoding="utf-8") as f:
        f.write(table)
    write_json(os.path.join(args.out, "vs_shuffled.json"), {"model": args.model, "judge": args.judge,
                                                             "judge_questions": args.judge_questions,
                                                             "level": LEVEL, "rows": rows}, indent=1)
    print(table, flush=True)
    if failed:
        return 2
    return 0 if all(r["holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
