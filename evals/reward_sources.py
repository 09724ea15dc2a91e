"""Does a judge's verdict teach? One IFEval run per reward source, every run measured by IFEval's programs.

The configs differ in the reward's source alone (`rubric_jax.config_base.ifeval_learning` holds the rest):

  program     configs/learn_ifeval.py             IFEval's checkers, the share of the prompt's instructions kept
  judged      configs/learn_ifeval_judged.py      the 1.5B judge, met / not met per instruction, the same share
  pairwise    configs/learn_ifeval_pairwise.py    the 1.5B comparing rollouts per instruction (RcRL's win rate)
  selfjudged  configs/learn_ifeval_selfjudged.py  the policy's frozen base verifies each instruction
  judged_soft configs/learn_ifeval_judged_soft.py the 1.5B's pass probabilities, mean over the instructions

    python -m evals.reward_sources --out=DIR [--only=program,judged] [--limit=N] [--variant=tiny]
                                   [--set=key=value ...]

trains what is missing (DIR/runs/<source>, `python -m rubric_jax.main`, which resumes an interrupted run; a
finished run is marked by DIR/runs/<source>/done.json with its wall time and reused), evaluates the base and every
newly trained policy with `evals.ifeval` on the same prompts (DIR/ifeval/<name>/), and writes
DIR/reward_sources.json, .md and .png. A source already trained and evaluated in DIR (its done.json,
metrics.jsonl and eval_results_strict.jsonl) joins the table whatever --only says and is not evaluated
again, so the table is built up from those small files over several invocations (checkpoints are not needed
once a policy is scored); the paired intervals refuse models scored on different prompts. The table:

  - per source: the instruction- and prompt-level strict gain over the base with its 95% paired bootstrap
    interval (prompts resampled, both models scored on the same draw), the share of the program's gain it
    recovers (gain_source / gain_program, instruction level, the ratio's interval from the same draws of all
    three models), the judge's agreement with the program over the run (mean of judge/program_agreement, logged
    every step, `rubric_jax.methods.agreement`), training wall time and the mean per-step time split into sample,
    judge and update (steps after the first, which compiles);
  - per instruction id: each source's strict accuracy gain over the base and its judge's agreement, so a reader
    sees which kinds of criteria a judge can teach.

The evaluation never judges with a model, and the program's verdicts never entered a judged run's reward.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from evals import ifeval as E
from evals.report import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = {"program": "learn_ifeval", "judged": "learn_ifeval_judged", "pairwise": "learn_ifeval_pairwise",
           "selfjudged": "learn_ifeval_selfjudged", "judged_soft": "learn_ifeval_judged_soft"}
BASE = "base"
PHASES = ("sample", "judge", "update")
GAIN = "inst_level_strict_acc"
GAINS = ("inst_level_strict_acc", "prompt_level_strict_acc")


class RewardSourcesError(ValueError):
    """A bad argument or an unusable earlier result; the message says which."""


# ---------------------------------------------------------------------------------------------
# Training


def train_subprocess(source: str, workdir: str, variant: str, overrides: Sequence[str]) -> None:
    """Trains configs/<SOURCES[source]>.py into `workdir` with the project's command (resuming what is there)."""
    config = os.path.join(ROOT, "configs", f"{SOURCES[source]}.py") + (f":{variant}" if variant else "")
    cmd = [sys.executable, "-m", "rubric_jax.main", f"--config={config}", f"--workdir={workdir}",
           *[f"--config.{kv}" for kv in overrides]]
    print(f"[{source}] {' '.join(cmd[1:])}", flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc != 0:
        raise RewardSourcesError(f"training {source} exited with status {rc} (workdir {workdir}); rerun to resume")


def source_config(source: str, variant: str = ""):
    """configs/<SOURCES[source]>.py's config, as `python -m rubric_jax.main` would load it."""
    import importlib.util

    name = SOURCES[source]
    spec = importlib.util.spec_from_file_location(f"{name}_config", os.path.join(ROOT, "configs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(variant or None)


def program_config(variant: str = ""):
    """configs/learn_ifeval.py's config (its model is the base every source starts from)."""
    return source_config("program", variant)


def ensure_trained(source: str, workdir: str, variant: str, overrides: Sequence[str], train: Callable) -> dict:
    """The run's done.json (training wall time, settings), training first when it is missing. A finished run
    trained with other settings is refused rather than silently reused."""
    done = os.path.join(workdir, "done.json")
    settings = {"config": SOURCES[source], "variant": variant, "overrides": list(overrides)}
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            rec = json.load(f)
        if {k: rec.get(k) for k in settings} != settings:
            raise RewardSourcesError(f"{workdir} was trained with {({k: rec.get(k) for k in settings})}, not "
                                     f"{settings}: use another --out or remove that run")
        return rec
    os.makedirs(workdir, exist_ok=True)
    t0 = time.perf_counter()
    train(source, workdir, variant, overrides)
    rec = {**settings, "train_seconds": time.perf_counter() - t0}
    write_json(done, rec)
    return rec


# ---------------------------------------------------------------------------------------------
# What a run logged


def run_log(workdir: str) -> dict[str, Any]:
    """From a run's metrics.jsonl: the steps, the judge's agreement (mean over steps that logged it, and per
    instruction id) and the mean per-step phase times (steps after the first when there are several)."""
    from rubric_jax.rl.metrics import read_metrics

    hist = read_metrics(workdir)
    if not hist:
        raise RewardSourcesError(f"{workdir}: no metrics.jsonl: the run did not train")
    later = hist[1:] or hist
    out: dict[str, Any] = {"steps": len(hist), "step_seconds": {}}
    for phase in PHASES + ("step",):
        vals = [m[f"time/{phase}"] for m in later if f"time/{phase}" in m]
        out["step_seconds"][phase] = float(np.mean(vals)) if vals else 0.0
    key = "judge/program_agreement"
    vals = [m[key] for m in hist if key in m]
    out["agreement"] = float(np.mean(vals)) if vals else float("nan")
    per_id: dict[str, list[float]] = {}
    for m in hist:
        for k, v in m.items():
            if k.startswith(key + "/"):
                per_id.setdefault(k[len(key) + 1:], []).append(v)
    out["agreement_per_id"] = {k: float(np.mean(v)) for k, v in sorted(per_id.items())}
    out["reward_mean"] = [float(m.get("reward/mean", float("nan"))) for m in hist]
    return out


# ---------------------------------------------------------------------------------------------
# The comparison


def recovery(base: Mapping, program: Mapping, other: Mapping, *, resamples: int = 10_000, seed: int = 0,
             confidence: float = E.CONFIDENCE) -> dict[str, float]:
    """The share of the program's instruction-level gain another source recovers, with a paired bootstrap interval.

        share = sum_p (o_p - b_p) / sum_p (r_p - b_p)

    (o, r, b: followed instructions per prompt of the other source's, the program's and the base's policy; the
    instruction counts cancel). Each replicate draws the prompts once for all three models. A replicate whose
    program gain is 0 has no share and is left out; "undefined" counts them. nan when the program gained nothing."""
    n = len(base["n_instructions"])
    for s in (program, other):
        if len(s["n_instructions"]) != n or list(s.get("prompts", [])) != list(base.get("prompts", [])):
            raise RewardSourcesError("a recovery share needs the three models scored on the same prompts")
    b, r, o = (np.asarray(s[GAIN], np.float64) for s in (base, program, other))
    den = (r - b).sum()
    out = {"share": float((o - b).sum() / den) if den != 0 else float("nan"), "low": float("nan"),
           "high": float("nan"), "undefined": 0}
    if resamples > 0 and n:
        idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
        num, dd = (o - b)[idx].sum(axis=1), (r - b)[idx].sum(axis=1)
        ok = dd != 0
        out["undefined"] = int((~ok).sum())
        if ok.any():
            q = (1.0 - confidence) / 2.0
            out["low"], out["high"] = (float(x) for x in np.quantile(num[ok] / dd[ok], [q, 1.0 - q]))
    return out


def per_id_accuracy(directory: str) -> dict[str, float]:
    """Strict instruction-level accuracy per instruction id from a model's eval_results_strict.jsonl (the
    breakdown evals.ifeval reports)."""
    rows = [row for _, row in E._json_lines(os.path.join(directory, "eval_results_strict.jsonl"))]
    return {iid: v["strict"] for iid, v in E._breakdown(rows, rows, lambda iid: iid).items()}


def _accuracy(scores: Mapping) -> dict[str, float]:
    """The strict accuracies of `prompt_scores`: followed over all instructions, kept over all prompts."""
    n = scores["n_instructions"]
    return {g: float(scores[g].sum() / (n.sum() if g.startswith("inst_") else len(n))) for g in GAINS}


def build_table(eval_dir: str, logs: Mapping[str, dict], runs: Mapping[str, dict], *, resamples: int,
                seed: int) -> dict[str, Any]:
    """The comparison of every trained source with the base, from `evals.ifeval`'s files in `eval_dir`."""
    scores = {name: E.scores_from_results(os.path.join(eval_dir, name)) for name in [BASE, *logs]}
    base_ids = per_id_accuracy(os.path.join(eval_dir, BASE))
    rows: dict[str, Any] = {}
    for source in logs:
        cmp = E.paired_bootstrap(scores[BASE], scores[source], resamples=resamples, seed=seed)
        ids = per_id_accuracy(os.path.join(eval_dir, source))
        rows[source] = {
            "config": SOURCES[source], "gain": {g: cmp[g] for g in GAINS},
            "accuracy": _accuracy(scores[source]),
            "agreement": logs[source]["agreement"], "train_seconds": runs[source]["train_seconds"],
            "steps": logs[source]["steps"], "step_seconds": logs[source]["step_seconds"],
            "per_id": {iid: {"gain": ids[iid] - base_ids[iid], "accuracy": ids[iid],
                             "agreement": logs[source]["agreement_per_id"].get(iid, float("nan"))}
                       for iid in sorted(base_ids, key=E._id_order)},
            "reward_mean": logs[source]["reward_mean"]}
        if source != "program" and "program" in logs:
            rows[source]["recovery"] = recovery(scores[BASE], scores["program"], scores[source], resamples=resamples,
                                                seed=seed)
    return {"base": {"accuracy": _accuracy(scores[BASE]), "per_id": base_ids},
            "prompts": len(scores[BASE]["n_instructions"]), "bootstrap": {"resamples": resamples, "seed": seed, "confidence": E.CONFIDENCE},
            "sources": rows}


# ---------------------------------------------------------------------------------------------
# Writing


def _pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:+.1f}"


def _ci(e: Mapping) -> str:
    return f"{_pct(e['difference'])} [{_pct(e['low'])}, {_pct(e['high'])}]"


def render_markdown(table: Mapping[str, Any]) -> str:
    src = table["sources"]
    lines = [f"# Does a judge's verdict teach? IFEval, {table['prompts']} prompts, strict", "",
             f"Base: {100 * table['base']['accuracy'][GAIN]:.1f}% instruction-level, "
             f"{100 * table['base']['accuracy']['prompt_level_strict_acc']:.1f}% prompt-level. Gains in points over "
             f"the base, 95% paired bootstrap intervals ({table['bootstrap']['resamples']} resamples of the prompts).",
             "", "| reward source | inst. gain | prompt gain | share of the program's gain | judge-program agreement "
             "| train wall | s/step: sample / judge / update |", "|---|---|---|---|---|---|---|"]
    for name, r in src.items():
        rec = r.get("recovery")
        share = "–" if rec is None else (f"{rec['share']:.2f} [{rec['low']:.2f}, {rec['high']:.2f}]"
                                         if math.isfinite(rec["share"]) else "– (no program gain)")
        agree = "program" if name == "program" else ("–" if not math.isfinite(r["agreement"])
                                                      else f"{100 * r['agreement']:.1f}%")
        t = r["step_seconds"]
        lines.append(f"| {name} | {_ci(r['gain'][GAIN])} | {_ci(r['gain']['prompt_level_strict_acc'])} | {share} | "
                     f"{agree} | {r['train_seconds'] / 60:.1f} min | {t['sample']:.1f} / {t['judge']:.1f} / "
                     f"{t['update']:.1f} |")
    names = list(src)
    lines += ["", "Per instruction id: strict accuracy gain over the base (points), and the judge's agreement with "
              "the program during training.", "",
              "| instruction id | base | " + " | ".join(f"{n} gain" for n in names) + " | "
              + " | ".join(f"{n} agreement" for n in names if n != "program") + " |",
              "|---" * (2 + len(names) + len([n for n in names if n != "program"])) + "|"]
    for iid, acc in sorted(table["base"]["per_id"].items(), key=lambda kv: E._id_order(kv[0])):
        gains = [_pct(src[n]["per_id"][iid]["gain"]) for n in names]
        agree = [("–" if not math.isfinite(src[n]["per_id"][iid]["agreement"])
                  else f"{100 * src[n]['per_id'][iid]['agreement']:.0f}%") for n in names if n != "program"]
        lines.append(f"| {iid} | {100 * acc:.0f}% | " + " | ".join(gains + agree) + " |")
    return "\n".join(lines) + "\n"


def plot(table: Mapping[str, Any], path: str) -> str:
    """Bars: each source's instruction-level strict gain with its interval; beside it the judge's agreement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src = table["sources"]
    names = list(src)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    g = [100 * src[n]["gain"][GAIN]["difference"] for n in names]
    lo = [100 * src[n]["gain"][GAIN]["low"] for n in names]
    hi = [100 * src[n]["gain"][GAIN]["high"] for n in names]
    err = np.array([[max(0.0, a - b) for a, b in zip(g, lo)], [max(0.0, b - a) for a, b in zip(g, hi)]])
    ax1.bar(names, g, yerr=np.nan_to_num(err), capsize=4, color="#4c72b0")
    ax1.axhline(0, color="black", lw=0.8)
    ax1.set_ylabel("instruction-level strict gain (points)")
    ax1.set_title("gain over the base, 95% interval")
    judged = [n for n in names if n != "program"]
    ax2.bar(judged, [100 * src[n]["agreement"] if math.isfinite(src[n]["agreement"]) else 0 for n in judged],
            color="#dd8452")
    ax2.set_ylim(0, 100)
    ax2.set_ylabel("agreement with the program (%)")
    ax2.set_title("the judge's live fidelity")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(table: Mapping[str, Any], out: str) -> dict[str, str]:
    paths = {"json": write_json(os.path.join(out, "reward_sources.json"), table)}
    paths["md"] = os.path.join(out, "reward_sources.md")
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(render_markdown(table))
    paths["png"] = plot(table, os.path.join(out, "reward_sources.png"))
    return paths


# ---------------------------------------------------------------------------------------------
# The command


def evaluate_ifeval(specs: Mapping[str, str], eval_dir: str, args) -> None:
    """`evals.ifeval` on every model of `specs` (name -> model spec), base first: greedy, cached answers."""
    argv = ["--models=" + ",".join(f"{n}={s}" for n, s in specs.items()), f"--out={eval_dir}",
            f"--bootstrap={args.bootstrap}", f"--bootstrap_seed={args.seed}"]
    if args.limit:
        argv.append(f"--limit={args.limit}")
    if args.cache_dir:
        argv.append(f"--cache_dir={args.cache_dir}")
    if E.main(argv) != 0:
        raise RewardSourcesError("the IFEval evaluation failed (its error is printed above)")


def _parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals.reward_sources", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory; runs and evaluations already there are reused")
    p.add_argument("--only", default=",".join(SOURCES), help=f"comma-separated subset of {list(SOURCES)}")
    p.add_argument("--variant", default="", help="config variant for every run (tiny: the smoke runs)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run, as --config.KEY=VALUE (e.g. model=/path)")
    p.add_argument("--base", default="", help="the base model spec (default: the program config's model)")
    p.add_argument("--limit", type=int, default=0, help="first N evaluation prompts (0 = all 132)")
    p.add_argument("--bootstrap", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--cache_dir", default="", help="evals answer cache (default: evals.ifeval's)")
    return p.parse_args(argv)


def evaluated(out: str, name: str) -> bool:
    """Whether `evals.ifeval` has scored model `name` into out/ifeval/<name>/."""
    return os.path.exists(os.path.join(out, "ifeval", name, "eval_results_strict.jsonl"))


def finished(out: str, source: str) -> bool:
    """A source trained and evaluated in an earlier invocation: its done.json, metrics.jsonl and IFEval results
    are all in `out`. Such a source joins the table whatever --only says, without its checkpoints, so the table
    can be built up over several sessions from the small files alone."""
    run = os.path.join(out, "runs", source)
    return (os.path.exists(os.path.join(run, "done.json")) and os.path.exists(os.path.join(run, "metrics.jsonl"))
            and evaluated(out, source))


def run(args, *, train: Callable = train_subprocess, evaluate: Callable = evaluate_ifeval) -> dict[str, Any]:
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SOURCES]
    if unknown or not only:
        raise RewardSourcesError(f"--only: unknown source(s) {unknown}; choose from {list(SOURCES)}")
    if any("=" not in kv for kv in args.set):
        raise RewardSourcesError(f"--set takes KEY=VALUE, got {[kv for kv in args.set if '=' not in kv]}")
    out = os.path.abspath(args.out)
    runs, logs, fresh = {}, {}, []
    for source in SOURCES:  # the table's order, whatever --only's
        if source not in only and not finished(out, source):
            continue
        workdir = os.path.join(out, "runs", source)
        trained_now = not os.path.exists(os.path.join(workdir, "done.json"))
        runs[source] = ensure_trained(source, workdir, args.variant, args.set, train)
        logs[source] = run_log(workdir)
        if trained_now or not evaluated(out, source):
            fresh.append(source)
    base = args.base or next((kv.split("=", 1)[1] for kv in args.set if kv.startswith("model=")),
                             None) or program_config().model
    eval_dir = os.path.join(out, "ifeval")
    todo = ([BASE] if not evaluated(out, BASE) else []) + fresh
    specs = {BASE: base, **{s: os.path.join(out, "runs", s) for s in runs}}
    if todo:  # a model evaluated before keeps its answers; a freshly trained one is (re)scored
        evaluate({n: specs[n] for n in todo}, eval_dir, args)
    table = build_table(eval_dir, logs, runs, resamples=args.bootstrap, seed=args.seed)
    table["base_model"] = base
    paths = write(table, out)
    print(render_markdown(table), flush=True)
    print(f"(written to {paths['md']}, {os.path.basename(paths['json'])} and {os.path.basename(paths['png'])})")
    return table


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = _parse(argv)
    try:
        run(args)
    except (RewardSourcesError, E.IFEvalError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
