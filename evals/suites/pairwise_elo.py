"""pairwise_elo: every pair of contestants on every prompt, both orders, rated with Bradley-Terry (Elo scale).

For each prompt every member of every contestant answers (a pooled contestant, e.g. several training seeds,
answers once per member); each judge compares every cross-contestant pair of answers in both presentation
orders (position bias cancels), on one overall criterion by default or on each criterion of a rubric
(averaged into one preference per ordered comparison). Comparisons {a, b, p_a, prompt, len_a, len_b, judge}
go to `evals.bradley_terry.rate`, the result to `evals.report.write_report`.
"""

from __future__ import annotations

import os

import numpy as np

from evals.generate import word_count
from evals.judges import parse_criteria
from evals.report import write_report
from evals.tools import SuiteTools


DEFAULT_PROMPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                               "creative_writing_eval.jsonl")


def load_prompts(path: str, n: int | None) -> list[dict]:
    """The first `n` (all when None or 0) records of a prompt JSONL as dicts, read by the project's validating
    reader (rubric_jax.data.load_jsonl: a malformed line names its file and line, an empty file is an error)."""
    from rubric_jax.data import load_jsonl

    recs = [r.to_dict() for r in load_jsonl(path)]
    if n is not None and n > 0:
        if n > len(recs):
            raise ValueError(f"--prompts={n}: {path} has only {len(recs)} prompts")
        recs = recs[:n]
    return recs


def collect(prompts: list[str], answers: dict[str, list[list[str]]], judges: list, criteria, *,
            progress: bool = True) -> dict[str, np.ndarray]:
    """answers[name][member][q] -> comparison arrays over all judges, prompts and ordered cross pairs; "p_a" is
    the mean over the criteria, "p_c" (comparisons, C) each criterion's own preference."""
    names = list(answers)
    rows = {k: [] for k in ("a", "b", "p_a", "p_c", "prompt", "len_a", "len_b", "judge")}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(judges) * len(prompts), desc="judge", unit="prompt", dynamic_ncols=True)
    try:
        for jname, judge in judges:
            for q, prompt in enumerate(prompts):
                flat = [(ci, ans[q]) for ci, n in enumerate(names) for ans in answers[n]]
                texts = [t for _, t in flat]
                pairs = [(x, y) for x in range(len(flat)) for y in range(len(flat)) if flat[x][0] != flat[y][0]]
                p_c = judge.p_first(prompt, texts, pairs, criteria)
                for (x, y), pc in zip(pairs, p_c):
                    rows["a"].append(flat[x][0])
                    rows["b"].append(flat[y][0])
                    rows["p_a"].append(float(pc.mean()))
                    rows["p_c"].append(pc)
                    rows["prompt"].append(q)
                    rows["len_a"].append(word_count(texts[x]))
                    rows["len_b"].append(word_count(texts[y]))
                    rows["judge"].append(jname)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return {"a": np.asarray(rows["a"], np.int64), "b": np.asarray(rows["b"], np.int64),
            "p_a": np.asarray(rows["p_a"], np.float64),
            "p_c": np.asarray(rows["p_c"], np.float64).reshape(len(rows["p_a"]), len(criteria)),
            "prompt": np.asarray(rows["prompt"], np.int64),
            "len_a": np.asarray(rows["len_a"], np.float64), "len_b": np.asarray(rows["len_b"], np.float64),
            "judge": np.asarray(rows["judge"])}


def per_criterion_win_rates(comps: dict, names: list[str], criteria, *, reps: int, seed: int) -> dict:
    """{criterion id: {"names", "matrix", "lo", "hi"}}: each criterion's win-rate matrix on its own preferences
    (`evals.bradley_terry.win_rates`), with prompt-bootstrap intervals (`win_rate_intervals`; the same prompt
    draws for every criterion, as the seed is shared)."""
    from evals.bradley_terry import _jsonable, win_rate_intervals, win_rates

    out = {}
    for c, cr in enumerate(criteria):
        p = comps["p_c"][:, c]
        lo, hi = win_rate_intervals(comps["a"], comps["b"], p, comps["prompt"], len(names), reps=reps, seed=seed)
        out[cr.id] = _jsonable({"names": list(names), "matrix": win_rates(comps["a"], comps["b"], p, len(names)),
                                "lo": lo, "hi": hi})
    return out


def format_table(result: dict) -> str:
    def f(x):
        return "   n/a" if x is None else f"{x:6.0f}"

    lines = [f"{'model':<20} {'elo':>6} {'95% CI':>15} {'LC elo':>7} {'LC 95% CI':>15} {'n':>6}"]
    for m in result["models"]:
        lines.append(f"{m['name']:<20} {f(m['elo'])} [{f(m['lo'])},{f(m['hi'])}] {f(m['lc_elo'])} "
                     f"[{f(m['lc_lo'])},{f(m['lc_hi'])}] {m['n']:>6}")
    tables = [("win rate", result.get("win_rate") or {})]
    tables += [(f"win rate on {cid}", wr) for cid, wr in (result.get("per_criterion") or {}).items()]
    for label, wr in tables:
        names = wr.get("names") or []
        lo, hi = (wr.get(k) or [[None] * len(names)] * len(names) for k in ("lo", "hi"))
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                w = wr["matrix"][j][i]
                ci = "" if lo[j][i] is None else f" [{lo[j][i]:.3f}, {hi[j][i]:.3f}]"
                lines.append(f"{label}: {names[j]} over {names[i]} "
                             + ("n/a" if w is None else f"{w:.3f}{ci}"))
    return "\n".join(lines)


def run(args, tools=None) -> dict:
    """args: the parsed command line (see evals.run); tools: its evals.tools.SuiteTools."""
    tools = tools or SuiteTools(args)
    contestants = tools.contestants(min_count=2)
    judge_specs = tools.judge_specs()
    criteria = parse_criteria(args.criteria)
    recs = load_prompts(args.data or DEFAULT_PROMPTS, args.prompts)
    prompts = [r["prompt"] for r in recs]
    members = tools.load(contestants, announce=True)
    answers = tools.answers(members, prompts)
    tools.out.jsonl("answers.jsonl", ({"id": r.get("id", q), "prompt": r["prompt"],
                                       "answers": {n: [a[q] for a in answers[n]] for n in answers}}
                                      for q, r in enumerate(recs)))

    questions = getattr(args, "judge_questions", "better") or "better"
    judges = [(spec, tools.judge(spec)) for spec in judge_specs]
    comps = collect(prompts, answers, judges, criteria, progress=not args.quiet)
    np.savez(tools.out.path("comparisons.npz"), **comps)

    from evals.bradley_terry import rate

    names = list(answers)
    result = rate(comps, names, bootstrap_reps=args.bootstrap, seed=args.seed)
    if len(criteria) > 1:
        result["per_criterion"] = per_criterion_win_rates(comps, names, criteria, reps=args.bootstrap,
                                                          seed=args.seed)
    result["eval"] = {
        "suite": "pairwise_elo", "prompts": len(prompts), "data": os.path.abspath(args.data or DEFAULT_PROMPTS),
        "criteria": [c.id for c in criteria], "judges": judge_specs, "seed": args.seed,
        "judge_questions": questions,
        "generation": tools.settings.key(),
        "models": {n: [{"spec": m.spec.label, "kind": m.spec.kind, "fingerprint": m.fingerprint} for m in ms]
                   for n, ms in members.items()},
        "judge_fingerprints": {spec: j.fingerprint for spec, j in judges},
    }
    title = args.title or f"pairwise_elo: {', '.join(names)} ({len(prompts)} prompts)"
    write_report(result, tools.out.dir, title=title)
    print(format_table(result), flush=True)
    return result
