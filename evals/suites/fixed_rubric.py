"""fixed_rubric: the fixed-metric script evaluation of "RARE: Adaptive Rubric Evolution ..." on the held-out
short-video script requests (rubric_jax/data/scripts_test.jsonl), plus blind pairwise validation.

Pointwise: every model writes one script per request; a judge (evals.scorers) grades each script on twelve
fixed metrics, three per category, each on 0 / 1 / 2 (fails / partly meets / fully meets). With e_l the score
of metric l and M_c the three metrics of category c:

    category_c = 100 * sum_{l in M_c} e_l / 6          overall = 100 * sum_{l=1..12} e_l / 24

(a fixed denominator: a script with an unreadable metric has no category or overall score and is counted in
`unreadable`). Means are taken per task type (record["task"]: 2D animation, 3D/stop-motion, live action), and
the headline number averages the type means equally ("macro" over types), as the paper does; intervals
resample scripts within each type (stratified percentile bootstrap).

Pairwise validation (two models, --fixed_pair=A,B, default the first two): for each request the judge compares
A's and B's scripts blindly in both orders (evals.judges, criterion "overall script quality"). Each order's
preference for A, p, is a verdict v = 1 if p - 0.5 >= tie_eps, 0 if 0.5 - p >= tie_eps, else 0.5 (tie);
the pair's outcome is the mean of its two verdicts (orders that disagree make a tie). Preference score of A =
mean outcome over pairs, per type and macro over types; 95% interval: percentile bootstrap resampling pairs
with replacement within each task type. Order consistency = fraction of pairs whose two verdicts agree.

Writes to --out: results.json, report.md, fixed_rubric.png, answers.jsonl.
"""

from __future__ import annotations

import json
import math
import os
from typing import Sequence

import numpy as np

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "rubric_jax", "data", "scripts_test.jsonl")

# (category, id, name, what is checked, level 0, level 1, level 2) -- our own wording of the twelve metrics
METRICS = [
    ("query_fulfillment", "coverage", "Requirement coverage",
     "Does the script deliver the content, outcomes and hard constraints (length, shot count, format) the request asks for?",
     "Key requested content or a hard constraint is missing or broken.",
     "Most of the request is delivered but one requirement is weak or missing.",
     "Every requested element and constraint is present in the script itself."),
    ("query_fulfillment", "elaboration", "Grounded elaboration",
     "Do the script's own additions build on the request without contradicting it or pulling focus from the main story?",
     "Additions contradict the request or replace its story.",
     "Additions are thin, generic or drift somewhat from the main line.",
     "Additions enrich the requested story and stay on its main line."),
    ("query_fulfillment", "style", "Tone and style",
     "Do the genre, mood, rhythm and visual style match what the request asks for, through to the ending?",
     "The tone or visual style clearly differs from the request.",
     "The style matches in places but slips in key scenes or the ending.",
     "Tone and style match the request throughout."),
    ("narrative_coherence", "logic", "Cause and time order",
     "Do events follow from their causes, in a consistent order in time?",
     "Events happen without cause or the timeline is contradictory.",
     "Mostly logical, with a gap or a jump that a viewer would notice.",
     "Every turn is caused and the sequence of events is consistent."),
    ("narrative_coherence", "motivation", "Character motivation",
     "Do characters act in line with what they want, know and face, and do their changes have causes?",
     "Characters act against their goals or change for no reason.",
     "Motivation is mostly clear but one important choice is unexplained.",
     "Actions and changes follow from goals, knowledge and circumstances."),
    ("narrative_coherence", "continuity", "Continuity across scenes",
     "Do characters, places, props and information stay consistent from scene to scene?",
     "Something a viewer would notice contradicts an earlier scene.",
     "Minor slips in props, positions or information.",
     "States carry over consistently across all scenes."),
    ("cinematic_executability", "observability", "Shown on screen",
     "Are conflict, motives and outcomes conveyed through images, action, dialogue or sound rather than explanation?",
     "Key story information exists only as narration or notes that cannot be filmed.",
     "Some key beats are told rather than shown.",
     "Everything important can be seen or heard."),
    ("cinematic_executability", "shot_feasibility", "Feasible shots",
     "Is each shot clear and filmable, without piling too many or conflicting actions into one shot?",
     "Shots are vague, impossible or overloaded with conflicting actions.",
     "Most shots are filmable but some are unclear or overloaded.",
     "Every shot is clear, single-purpose and realisable."),
    ("cinematic_executability", "pacing", "Pacing and shot purpose",
     "Do shot lengths, transitions and information density suit the story, with each shot earning its place?",
     "Pacing is badly off: key beats rushed or long stretches that add nothing.",
     "Uneven pacing or a few redundant shots.",
     "Each shot has a purpose and the key beats get enough time."),
    ("dramatic_effectiveness", "engagement", "Engagement and progression",
     "Does the opening hook interest, and does the tension or situation develop and change through the middle?",
     "Flat opening and no development.",
     "Some interest but the middle stalls or the turn changes little.",
     "A hooking opening and a steadily developing situation with a real turn."),
    ("dramatic_effectiveness", "payoff", "Setup, payoff and ending",
     "Are earlier setups paid off, and does the ending follow from what came before?",
     "Setups are dropped or the ending is arbitrary or missing.",
     "Some setups pay off but the ending is weak or abrupt.",
     "Setups pay off and the ending completes or reframes the story."),
    ("dramatic_effectiveness", "distinctiveness", "Distinctiveness and resonance",
     "Does the script avoid a formulaic treatment and leave a specific, memorable impression tied to its story?",
     "Generic and forgettable.",
     "Some specific touches within a familiar treatment.",
     "A distinct treatment whose final image or moment stays with the viewer."),
]
CATEGORIES = ["query_fulfillment", "narrative_coherence", "cinematic_executability", "dramatic_effectiveness"]
METRIC_IDS = [m[1] for m in METRICS]


def criteria():
    from rubric_jax.rubrics.types import Criterion

    return [Criterion(id=mid, name=name, check=check, levels=(l0, l1, l2), max_points=2)
            for _, mid, name, check, l0, l1, l2 in METRICS]


PAIR_CRITERION_TEXT = ("Which script better fulfils the request as a short video script: it delivers what was "
                       "asked, the story is coherent, it can be filmed shot by shot, and it is dramatically effective?")


# ---------------------------------------------------------------------------------------------
# Pure scoring


def normalise(scores) -> dict[str, np.ndarray]:
    """scores (N, 12) in metric order (0..2, NaN unreadable) -> {category: (N,), "overall": (N,)} on 0..100.

    category = 100 * sum of its 3 metrics / 6, overall = 100 * sum of 12 / 24; NaN where any metric entering
    the number is NaN (the denominator never shrinks)."""
    s = np.asarray(scores, np.float64)
    if s.ndim != 2 or s.shape[1] != len(METRICS):
        raise ValueError(f"scores must be (N, {len(METRICS)}), got {s.shape}")
    out = {}
    for c in CATEGORIES:
        idx = [k for k, m in enumerate(METRICS) if m[0] == c]
        out[c] = 100.0 * s[:, idx].sum(axis=1) / (2.0 * len(idx))
    out["overall"] = 100.0 * s.sum(axis=1) / (2.0 * len(METRICS))
    return out


def macro_mean(values, groups) -> float:
    """Mean within each group (finite values only), then the unweighted mean of the group means."""
    v = np.asarray(values, np.float64)
    g = np.asarray(groups)
    means = [np.nanmean(v[g == k]) for k in np.unique(g) if np.isfinite(v[g == k]).any()]
    return float(np.mean(means)) if means else float("nan")


def stratified_bootstrap(values, groups, *, stat=macro_mean, reps: int = 1000, seed: int = 0,
                         level: float = 0.95):
    """(lo, hi) percentile interval of stat(values, groups) resampling items with replacement within each
    group (each group keeps its size); (None, None) when reps == 0."""
    v = np.asarray(values, np.float64)
    g = np.asarray(groups)
    if reps <= 0 or v.size == 0:
        return None, None
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(g == k) for k in np.unique(g)]
    stats = np.empty(int(reps))
    for r in range(int(reps)):
        idx = np.concatenate([m[rng.integers(0, m.size, m.size)] for m in members])
        stats[r] = stat(v[idx], g[idx])
    stats = stats[np.isfinite(stats)]
    if not stats.size:
        return None, None
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [q, 1.0 - q])
    return float(lo), float(hi)


def verdict(p, tie_eps: float):
    """Preference for A in [0, 1] -> 1 (A wins), 0 (B wins) or 0.5 (tie: |p - 0.5| < tie_eps)."""
    p = np.asarray(p, np.float64)
    return np.where(p - 0.5 >= tie_eps, 1.0, np.where(0.5 - p >= tie_eps, 0.0, 0.5))


def pair_outcomes(p_ab, p_ba, tie_eps: float) -> tuple[np.ndarray, np.ndarray]:
    """p_ab: P(A better) with A shown first; p_ba: P(B better) with B shown first (both (N,)).
    Returns (outcome for A per pair = mean of the two order verdicts, whether both orders agree)."""
    v1 = verdict(p_ab, tie_eps)
    v2 = verdict(1.0 - np.asarray(p_ba, np.float64), tie_eps)
    return (v1 + v2) / 2.0, v1 == v2


def summarise_pairwise(outcome, agree, types, *, reps: int, seed: int, level: float = 0.95) -> dict:
    outcome, types = np.asarray(outcome, np.float64), np.asarray(types)
    lo, hi = stratified_bootstrap(outcome, types, reps=reps, seed=seed, level=level)
    per_type = {}
    for k, t in enumerate(sorted(set(types.tolist()))):
        m = types == t
        tlo, thi = stratified_bootstrap(outcome[m], types[m], reps=reps, seed=seed + 1 + k, level=level)
        per_type[t] = {"preference": float(outcome[m].mean()), "lo": tlo, "hi": thi, "n": int(m.sum()),
                       "wins": int((outcome[m] == 1).sum()), "losses": int((outcome[m] == 0).sum())}
    return {"preference": macro_mean(outcome, types), "lo": lo, "hi": hi, "n": int(outcome.size),
            "order_consistency": float(np.mean(agree)) if len(agree) else None, "per_type": per_type}


# ---------------------------------------------------------------------------------------------
# Report


def _f(x, nd=1):
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def render_markdown(result: dict, title: str) -> str:
    names = list(result["models"])
    cols = CATEGORIES + ["overall"]
    out = [f"# {title}", "", "Fixed metrics scored 0-2; category = 100 * sum / 6, overall = 100 * sum / 24; "
           "'all types' = mean of the per-type means; intervals: bootstrap within task types.", "",
           "## Overall", "", "| model | " + " | ".join(cols) + " | 95% CI (overall) | unreadable |",
           "|---|" + "---:|" * len(cols) + "---|---:|"]
    for n in names:
        m = result["models"][n]
        cells = [_f(m["macro"][c]) for c in cols]
        out.append(f"| {n} | " + " | ".join(cells) + f" | [{_f(m['overall_lo'])}, {_f(m['overall_hi'])}] | "
                   f"{m['unreadable']} |")
    out += ["", "## Per task type", "", "| model | task | " + " | ".join(cols) + " | n |",
            "|---|---|" + "---:|" * len(cols) + "---:|"]
    for n in names:
        for t, d in result["models"][n]["per_type"].items():
            out.append(f"| {n} | {t} | " + " | ".join(_f(d[c]) for c in cols) + f" | {d['n']} |")
    out += ["", "## Per metric (mean score 0-2, all scripts)", "", "| metric | " + " | ".join(names) + " |",
            "|---|" + "---:|" * len(names)]
    for mid in METRIC_IDS:
        out.append(f"| {mid} | " + " | ".join(_f(result["models"][n]["metrics"][mid], 2) for n in names) + " |")
    pw = result.get("pairwise")
    if pw:
        out += ["", f"## Blind pairwise: {pw['a']} vs {pw['b']}", "",
                f"Preference for {pw['a']} (ties and order disagreements count half): {_f(100 * pw['preference'])}% "
                f"[{_f(None if pw['lo'] is None else 100 * pw['lo'])}, {_f(None if pw['hi'] is None else 100 * pw['hi'])}]; "
                f"order consistency {_f(None if pw['order_consistency'] is None else 100 * pw['order_consistency'])}%.",
                "", "| task | preference % | 95% CI | wins | losses | n |", "|---|---:|---|---:|---:|---:|"]
        for t, d in pw["per_type"].items():
            ci = "–" if d["lo"] is None else f"[{100 * d['lo']:.1f}, {100 * d['hi']:.1f}]"
            out.append(f"| {t} | {100 * d['preference']:.1f} | {ci} | {d['wins']} | {d['losses']} | {d['n']} |")
    out += ["", "![scores](fixed_rubric.png)", "", "## Text diagnostics", "",
            "| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for k in sorted({k for n in names for k in result["models"][n]["diagnostics"]}):
        out.append(f"| {k} | " + " | ".join(_f(result["models"][n]["diagnostics"].get(k), 3) for n in names) + " |")
    out += ["", "## Settings", "", "```json", json.dumps(result["eval"], indent=2, sort_keys=True), "```", ""]
    return "\n".join(out)


def plot(result: dict, path: str, title: str) -> str:
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = list(result["models"])
    cols = CATEGORIES + ["overall"]
    pw = result.get("pairwise")
    fig, axes = plt.subplots(1, 2 if pw else 1, figsize=(12 if pw else 8, 4), dpi=110, squeeze=False)
    ax = axes[0, 0]
    w = 0.8 / max(1, len(names))
    for k, n in enumerate(names):
        vals = [result["models"][n]["macro"][c] for c in cols]
        ax.bar(np.arange(len(cols)) + (k - (len(names) - 1) / 2) * w, [np.nan if v is None else v for v in vals],
               width=w * 0.9, label=n, color=f"C{k}")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([c.replace("_", "\n") for c in cols], fontsize=7)
    ax.set_ylim(0, 100)
    ax.set_ylabel("score (0-100)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    if pw:
        ax = axes[0, 1]
        rows = list(pw["per_type"].items()) + [("all types", pw)]
        y = np.arange(len(rows))[::-1]
        for yy, (t, d) in zip(y, rows):
            err = None if d["lo"] is None else [[d["preference"] - d["lo"]], [d["hi"] - d["preference"]]]
            ax.errorbar([100 * d["preference"]], [yy], xerr=None if err is None else 100 * np.asarray(err),
                        fmt="o", capsize=4, color="C0")
        ax.axvline(50, color="grey", ls="--", lw=0.8)
        ax.set_yticks(y)
        ax.set_yticklabels([t for t, _ in rows], fontsize=7)
        ax.set_xlim(0, 100)
        ax.set_xlabel(f"% preference for {pw['a']} over {pw['b']}")
        ax.set_title("blind pairwise, both orders", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# Suite


def add_args(group) -> None:
    group.add_argument("--fixed_data", default="", help="script requests JSONL (default: scripts_test.jsonl)")
    group.add_argument("--fixed_pair", default="", help="A,B: the two models compared pairwise (default: first two)")
    group.add_argument("--tie_eps", type=float, default=0.05, help="|p - 0.5| < tie_eps is a tie")
    group.add_argument("--fixed_score_mode", default="hard", choices=("auto", "logit", "hard", "generate"),
                       help="how an in-process judge reads 0/1/2 (hard: most probable integer, as in the paper)")


def load_requests(path: str, n: int) -> list[dict]:
    recs = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            if line.strip():
                r = json.loads(line)
                if not isinstance(r.get("prompt"), str) or not r["prompt"].strip():
                    raise ValueError(f"{path}:{k}: missing 'prompt'")
                recs.append({"id": r.get("id", f"line{k}"), "task": str(r.get("task", "all")), "prompt": r["prompt"]})
    if n > 0:
        if n > len(recs):
            raise ValueError(f"--prompts={n}: {path} has only {len(recs)} requests")
        # spread the first n over the task types, so a small run still covers every type
        by = {}
        for r in recs:
            by.setdefault(r["task"], []).append(r)
        order = [r for k in range(max(map(len, by.values()))) for rs in by.values() if k < len(rs) for r in [rs[k]]]
        recs = order[:n]
    return recs


def model_summary(scores: np.ndarray, types: Sequence[str], *, reps: int, seed: int) -> dict:
    norm = normalise(scores)
    types = np.asarray(types)
    cols = CATEGORIES + ["overall"]
    per_type = {t: {**{c: float(np.nanmean(norm[c][types == t])) if np.isfinite(norm[c][types == t]).any()
                       else None for c in cols}, "n": int((types == t).sum())} for t in sorted(set(types.tolist()))}
    lo, hi = stratified_bootstrap(norm["overall"], types, reps=reps, seed=seed)
    return {"macro": {c: macro_mean(norm[c], types) for c in cols}, "overall_lo": lo, "overall_hi": hi,
            "per_type": per_type, "metrics": {mid: float(np.nanmean(scores[:, k])) if np.isfinite(scores[:, k]).any()
                                              else None for k, mid in enumerate(METRIC_IDS)},
            "unreadable": int(np.isnan(scores).sum()), "per_script": {c: norm[c].tolist() for c in cols}}


def run(args, tools=None) -> dict:
    from evals.tools import SuiteTools
    from rubric_jax.rl.diagnostics import text_diagnostics

    tools = tools or SuiteTools(args)
    judge_spec = args.judge.strip() or tools.judge_specs()[0]
    if args.tie_eps < 0 or args.tie_eps > 0.5:
        raise ValueError("--tie_eps must be in [0, 0.5]")
    data = os.path.abspath(args.fixed_data or DEFAULT_DATA)
    recs = load_requests(data, args.prompts)
    prompts, types = [r["prompt"] for r in recs], [r["task"] for r in recs]
    members = tools.load()
    names = list(members)
    pair = [s.strip() for s in args.fixed_pair.split(",") if s.strip()] or names[:2]
    # one model alone: pointwise scores only (there is nothing to compare it with)
    if (len(names) > 1 or args.fixed_pair) and (len(pair) != 2 or any(p not in members for p in pair)
                                                 or pair[0] == pair[1]):
        raise ValueError(f"--fixed_pair: expected two different model names out of {names}, got {args.fixed_pair!r}")
    scorer = tools.scorer(judge_spec, mode=args.fixed_score_mode)
    crits = criteria()

    result = {"models": {}}
    answers = {}
    for name in names:
        member = members[name][0]  # a pooled contestant is scored on its first member
        tools.log(f"fixed_rubric: generating {len(prompts)} scripts for {name}")
        answers[name] = tools.generate(member, prompts, desc=name)
        scores = np.full((len(prompts), len(crits)), np.nan)
        for q, (prompt, ans) in enumerate(zip(prompts, answers[name])):
            tools.log(f"\rfixed_rubric: scoring {name} {q + 1}/{len(prompts)}", end="")
            scores[q] = scorer.score(prompt, [ans], crits)[0]
        tools.log("")
        summ = model_summary(scores, types, reps=args.bootstrap, seed=args.seed)
        summ["scores"] = scores.tolist()
        summ["diagnostics"] = text_diagnostics(answers[name], prompts, getattr(member, "inner", member).tokenizer)
        result["models"][name] = summ

    judge = None
    if len(names) > 1:
        judge = tools.judge(judge_spec)
        result["pairwise"] = _pairwise(args, tools, judge, prompts, types, answers, pair)
    tools.out.jsonl("answers.jsonl", ({**r, "answers": {n: answers[n][q] for n in names}} for q, r in enumerate(recs)))
    result["requests"] = [{"id": r["id"], "task": r["task"]} for r in recs]
    result["eval"] = {"suite": "fixed_rubric", "data": data, "requests": len(recs), "judge": judge_spec,
                      "judge_questions": getattr(args, "judge_questions", "better"),
                      "scorer_fingerprint": scorer.fingerprint,
                      "judge_fingerprint": None if judge is None else judge.fingerprint,
                      "score_mode": args.fixed_score_mode, "tie_eps": args.tie_eps, "seed": args.seed,
                      "generation": tools.settings.key(), "bootstrap_reps": args.bootstrap, "level": 0.95,
                      "metrics": {m[1]: {"category": m[0], "name": m[2]} for m in METRICS}}
    title = args.title or f"fixed_rubric: {', '.join(names)} ({len(recs)} requests)"
    result["title"] = title
    tools.out.json("results.json", result)
    tools.out.text("report.md", render_markdown(result, title))
    plot(result, tools.out.path("fixed_rubric.png"), title)
    print(format_table(result), flush=True)
    return result


def _pairwise(args, tools, judge, prompts, types, answers, pair) -> dict:
    """Blind pairwise validation: both orders per request, one overall criterion."""
    from rubric_jax.rubrics.types import Criterion

    crit = Criterion(id="overall_script", name="Overall script quality", check=PAIR_CRITERION_TEXT)
    p_ab, p_ba = np.empty(len(prompts)), np.empty(len(prompts))
    for q, prompt in enumerate(prompts):
        tools.log(f"\rfixed_rubric: pairwise {q + 1}/{len(prompts)}", end="")
        p = judge.p_first(prompt, [answers[pair[0]][q], answers[pair[1]][q]], [(0, 1), (1, 0)], [crit])[:, 0]
        p_ab[q], p_ba[q] = p
    tools.log("")
    outcome, agree = pair_outcomes(p_ab, p_ba, args.tie_eps)
    return {"a": pair[0], "b": pair[1], "p_ab": p_ab.tolist(), "p_ba": p_ba.tolist(), "outcome": outcome.tolist(),
            **summarise_pairwise(outcome, agree, types, reps=args.bootstrap, seed=args.seed)}


def format_table(result: dict) -> str:
    cols = CATEGORIES + ["overall"]
    lines = [f"{'model':<22}" + "".join(f"{c[:12]:>13}" for c in cols)]
    for n, m in result["models"].items():
        lines.append(f"{n:<22}" + "".join(f"{_f(m['macro'][c]):>13}" for c in cols))
    pw = result.get("pairwise")
    if pw:
        lines.append(f"pairwise {pw['a']} over {pw['b']}: {_f(100 * pw['preference'])}% "
                     f"(order consistency {_f(None if pw['order_consistency'] is None else 100 * pw['order_consistency'])}%)")
    return "\n".join(lines)
