"""rubric_score: Creative Writing v3-style evaluation (see "Creative Writing Bench v3" by S. Paech, as used in the
RcRL evaluation in "Rubric Curriculum RL: Exploiting the Generation-Verification Gap in
Non-Verifiable Domains"): pointwise criterion scores plus pairwise comparisons with win margins.

Prompts come in the public CWv3 prompt-file format, a JSON object

    {"<id>": {"title": str, "category": str, "writing_prompt": str, "seed_modifiers": [str, ...]}, ...}

(--data; default evals/data/rubric_score_prompts.json; --prompts N keeps the first N, --modifiers N the first
N seed modifiers of each). Every (prompt, seed modifier, iteration) is one item. The modifier goes into the
prompt by replacing each "<SEED>" in `writing_prompt`; a prompt without that marker gets it appended as a line
("Work this into the piece: <modifier>"). Iteration i samples with generation seed `--seed + i`, so
`--iterations=3` gives three independent answers per item and model.

Pointwise: each answer is scored 0..20 on every criterion of CRITERIA. A positive criterion scores how strongly a
quality is present; a negative one scores how strongly a flaw is present and is inverted before averaging,

    s'_c = s_c             (positive c),        s'_c = 20 - s_c        (negative c),
    rubric score (0-20)  = mean over the model's answers and criteria of s'_c     (unreadable scores skipped),
    rubric score (0-100) = 5 x rubric score (0-20).

Pairwise: every cross-model pair of answers to an item is judged in both presentation orders on the criteria of
PAIRWISE (the judge's P(first is better), averaged over them: p). The strength of the preference gives a margin

    d = |p - 0.5|:   d < 0.10 -> "+",   0.10 <= d < 0.25 -> "++",   d >= 0.25 -> "+++"

for the preferred side (p > 0.5: A, p < 0.5: B; p == 0.5 exactly, i.e. an unreadable verdict, is a tie). A signed
margin m in {-3..3} (positive: A won) becomes the soft outcome

    y = 0.5 + m / 6      (A+++ -> 1, A++ -> 5/6, A+ -> 2/3, tie -> 1/2, B+ -> 1/3, B++ -> 1/6, B+++ -> 0)

and the y's are fitted with margin-weighted Bradley-Terry (evals.bradley_terry.rate: maximum likelihood with soft
targets, ELO scale, first model at 1000, prompt-clustered bootstrap intervals). A win by +++ thus counts as a
certain win and a win by + as two thirds of one, like Glicko-with-margins in CWv3 but in closed form.

Writes into --out: results.json, report.md, answers.jsonl, comparisons.npz, rubric_scores.png, ratings.png,
win_rates.png. Per-model text diagnostics (rubric_jax.rl.diagnostics.text_diagnostics) are included.
"""

from __future__ import annotations

import json
import os

import numpy as np

from evals.generate import word_count
from evals.scorers import scale_criterion
from evals.tools import SuiteTools
from rubric_jax.rubrics.types import Criterion

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
DEFAULT_PROMPTS = os.path.join(DATA_DIR, "rubric_score_prompts.json")
SEED_MARK = "<SEED>"
MAX_POINTS = 20
# |p - 0.5| thresholds between "+" / "++" and "++" / "+++" (module docstring)
MARGIN_THRESHOLDS = (0.10, 0.25)
MAX_MARGIN = 3

# (id, name, what is judged, anchor for 0, anchor for 20). Our own wording.
POSITIVE = [
    ("imagery", "Vivid imagery", "Concrete sensory detail lets the reader see, hear and feel the scene.",
     "flat and abstract, nothing can be pictured", "scenes rise off the page in precise, telling detail"),
    ("characters", "Believable characters", "People act and speak from their own wants, fears and history.",
     "names without inner life", "characters feel like real people whose choices follow from who they are"),
    ("voice", "Distinct voice", "The narration has a recognisable personality that suits the piece.",
     "generic, interchangeable narration", "an unmistakable, well-controlled voice throughout"),
    ("dialogue", "Natural dialogue", "Speech sounds like people talking and does work in the story (if any).",
     "stilted or expository speech", "dialogue that reveals character and moves things along"),
    ("structure", "Shape and pacing", "The piece has a clear arc and spends its words where they matter.",
     "shapeless, rushed or dragging", "deliberate shape, every section earns its length"),
    ("coherence", "Internal coherence", "Events, details and logic hold together without contradictions.",
     "contradictory or confusing", "fully consistent and easy to follow"),
    ("originality", "Originality", "Ideas, angles and images feel fresh rather than borrowed.",
     "stock ideas from start to finish", "surprising yet fitting choices throughout"),
    ("emotion", "Emotional weight", "The piece makes the reader care and leaves a feeling behind.",
     "leaves the reader cold", "genuinely moving or unsettling"),
    ("prompt_fit", "Follows the prompt", "It answers the writing prompt and the seed modifier it was given.",
     "ignores the prompt", "takes up every part of the prompt in a thoughtful way"),
    ("craft", "Sentence craft", "Sentences are varied, precise and rhythmically controlled.",
     "clumsy, monotonous or ungrammatical", "polished sentences a careful editor would keep"),
]
NEGATIVE = [
    ("purple_prose", "Purple prose", "How much ornate, over-decorated language gets in the way of meaning.",
     "none at all", "nearly every sentence is overwrought"),
    ("unearned_resolution", "Unearned resolution", "How much the ending resolves things without the story "
     "having built toward it (sudden epiphanies, tidy bows).", "none at all", "the ending is entirely unearned"),
    ("cliche", "Cliché", "How much the piece leans on stock phrases, characters or plot beats.",
     "none at all", "built almost entirely from clichés"),
    ("telling", "Telling instead of showing", "How often emotions and traits are announced rather than "
     "shown through action and detail.", "never", "almost everything is announced"),
    ("repetition", "Repetition", "How much words, phrases or ideas recur without purpose.",
     "none at all", "the same phrases loop over and over"),
    ("incoherent", "Incoherence", "How much of the text is garbled, disjointed or nonsensical.",
     "none at all", "largely unreadable"),
]
PAIRWISE = [
    Criterion(id="pw_quality", name="Writing quality",
              check="Which response is the better written piece: precise, readable and well crafted?"),
    Criterion(id="pw_story", name="Engaging and coherent",
              check="Which response is more engaging, original and internally coherent as a piece of fiction?"),
    Criterion(id="pw_restraint", name="Restraint",
              check="Which response avoids clichés, filler and over-decorated language better?"),
]


def criteria() -> tuple[list[Criterion], np.ndarray]:
    """(the 0..20 criteria, bool mask of the negative ones)."""
    crits = [scale_criterion(i, n, c, MAX_POINTS, lo, hi) for i, n, c, lo, hi in POSITIVE]
    crits += [scale_criterion(i, n, "Flaw to rate (0 = absent, 20 = pervasive): " + c, MAX_POINTS, lo, hi)
              for i, n, c, lo, hi in NEGATIVE]
    return crits, np.array([False] * len(POSITIVE) + [True] * len(NEGATIVE))


def invert_negative(points: np.ndarray, negative: np.ndarray, max_points: int = MAX_POINTS) -> np.ndarray:
    """s' = max_points - s on the negative criteria (last axis), s elsewhere; NaN stays NaN."""
    points = np.asarray(points, np.float64)
    return np.where(np.asarray(negative, bool), max_points - points, points)


# ---- prompts ------------------------------------------------------------------------------------------------

def load_cwv3_prompts(path: str) -> list[dict]:
    """The CWv3 prompt file -> [{"id", "title", "category", "writing_prompt", "seed_modifiers"}], file order.
    ValueError naming the prompt id for any malformed entry."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a non-empty JSON object mapping prompt ids to prompts")
    out = []
    for pid, rec in data.items():
        where = f"{path}: prompt {pid!r}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected an object, got {type(rec).__name__}")
        for key in ("title", "category", "writing_prompt"):
            if not isinstance(rec.get(key), str) or (key == "writing_prompt" and not rec[key].strip()):
                raise ValueError(f"{where}: {key!r} must be a{' non-empty' if key == 'writing_prompt' else ''} "
                                 f"string")
        mods = rec.get("seed_modifiers")
        if (not isinstance(mods, list) or not mods
                or not all(isinstance(m, str) and m.strip() for m in mods)):
            raise ValueError(f"{where}: 'seed_modifiers' must be a non-empty list of non-empty strings")
        out.append({"id": str(pid), "title": rec["title"], "category": rec["category"],
                    "writing_prompt": rec["writing_prompt"], "seed_modifiers": list(mods)})
    return out


def apply_seed(writing_prompt: str, modifier: str) -> str:
    """Replace every "<SEED>" with the modifier, or append it as a last line when there is no marker."""
    if SEED_MARK in writing_prompt:
        return writing_prompt.replace(SEED_MARK, modifier)
    return f"{writing_prompt.rstrip()}\n\nWork this into the piece: {modifier}"


def expand_items(prompts: list[dict], iterations: int) -> list[dict]:
    """One item per (prompt, seed modifier, iteration), iteration-major (all of iteration 0 first)."""
    return [{"id": p["id"], "title": p["title"], "category": p["category"], "modifier": m, "iteration": it,
             "prompt": apply_seed(p["writing_prompt"], m)}
            for it in range(iterations) for p in prompts for m in p["seed_modifiers"]]


# ---- margins --------------------------------------------------------------------------------------------------

def margins(p_a) -> np.ndarray:
    """Signed margins in {-3..3}: +k means A wins with k pluses, -k B does, 0 an exact tie (docstring)."""
    p = np.asarray(p_a, np.float64)
    d = np.abs(p - 0.5)
    k = 1 + (d >= MARGIN_THRESHOLDS[0]).astype(np.int64) + (d >= MARGIN_THRESHOLDS[1]).astype(np.int64)
    return np.sign(p - 0.5).astype(np.int64) * k


def margin_label(m: int) -> str:
    return "=" if m == 0 else ("A" if m > 0 else "B") + "+" * abs(int(m))


def margin_targets(m) -> np.ndarray:
    """y = 0.5 + m / (2 * 3): the soft outcome Bradley-Terry fits for a signed margin m."""
    return 0.5 + np.asarray(m, np.float64) / (2 * MAX_MARGIN)


def rate_margins(comps: dict, names: list[str], *, bootstrap_reps: int = 0, seed: int = 0) -> dict:
    """Margin-weighted Bradley-Terry: comps["p_a"] -> margins -> soft targets -> evals.bradley_terry.rate."""
    from evals.bradley_terry import rate

    m = margins(comps["p_a"])
    res = rate({**comps, "p_a": margin_targets(m)}, names, bootstrap_reps=bootstrap_reps, seed=seed)
    counts = {}
    for i, n in enumerate(names):
        signed = np.concatenate([m[np.asarray(comps["a"]) == i], -m[np.asarray(comps["b"]) == i]])
        counts[n] = {margin_label(k): int((signed == k).sum()) for k in range(-MAX_MARGIN, MAX_MARGIN + 1)}
    res["margin_counts"] = counts  # per model, from its own side: "A+++" = it won by +++, "B+" = it lost by +
    res["margin_thresholds"] = list(MARGIN_THRESHOLDS)
    return res


# ---- shared running helpers (also used by evals.suites.elements) -----------------------------------------

def add_scorer_args(group) -> None:
    group.add_argument("--score_mode", default="auto", choices=("auto", "logit", "hard", "generate"),
                       help="pointwise scorer mode (evals.scorers; auto: generate for the 0-10 / 0-20 scales; "
                            "logit reads them digit by digit)")
    group.add_argument("--score_tokens", type=int, default=96,
                       help="tokens the in-process judge may write before its 'Score: N' line")


def make_pointwise(args, tools, spec: str):
    """The pointwise scorer with --score_mode and --score_tokens (an in-process judge reads them)."""
    if args.score_tokens < 8:
        raise ValueError("--score_tokens must be >= 8")
    return tools.scorer(spec, mode=args.score_mode, gen_max_new_tokens=args.score_tokens)


def diagnostics(answers: dict, prompts: list[str]) -> dict:
    """text_diagnostics of each model's answers (members pooled), grouped by prompt."""
    from rubric_jax.rl.diagnostics import text_diagnostics

    out = {}
    for name, per_member in answers.items():
        texts = [t for ans in per_member for t in ans]
        out[name] = text_diagnostics(texts, [p for _ in per_member for p in prompts])
    return out


def diagnostics_md(diag: dict) -> list[str]:
    keys = sorted({k for d in diag.values() for k in d})
    lines = ["## Text diagnostics", "", "| metric | " + " | ".join(diag) + " |", "|---|" + "---:|" * len(diag)]
    lines += [f"| {k} | " + " | ".join(f"{d.get(k, float('nan')):.3f}" for d in diag.values()) + " |" for k in keys]
    return lines + [""]


def heatmap(mat: np.ndarray, rows: list[str], cols: list[str], path: str, *, title: str, vmax: float) -> str:
    """Model x question heatmap, each cell annotated with its value (NaN grey)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(cols) + 2.5), max(2.5, 0.5 * len(rows) + 1.8)), dpi=110)
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = mat[i, j]
            ax.text(j, i, "–" if not np.isfinite(v) else f"{v:.1f}", ha="center", va="center", fontsize=7,
                    color="white" if np.isfinite(v) and v < 0.6 * vmax else "black")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=50, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def fmt(x, nd: int = 2) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.{nd}f}"


# ---- the suite ------------------------------------------------------------------------------------------------

def add_args(group) -> None:
    group.add_argument("--iterations", type=int, default=1, help="answers per (prompt, seed modifier) and model")
    group.add_argument("--modifiers", type=int, default=0, help="first N seed modifiers of each prompt (0 = all)")
    add_scorer_args(group)


def run(args, tools=None) -> dict:
    from evals.report import plot_ratings, plot_win_rates, render_markdown

    tools = tools or SuiteTools(args)
    if args.iterations < 1 or args.modifiers < 0:
        raise ValueError("--iterations must be >= 1 and --modifiers >= 0")
    contestants = tools.contestants()
    jspec = tools.judge_spec()
    data = args.data or DEFAULT_PROMPTS
    prompts = load_cwv3_prompts(data)
    if args.prompts:
        if args.prompts > len(prompts):
            raise ValueError(f"--prompts={args.prompts}: {data} has only {len(prompts)} prompts")
        prompts = prompts[:args.prompts]
    if args.modifiers:
        prompts = [{**p, "seed_modifiers": p["seed_modifiers"][:args.modifiers]} for p in prompts]
    items = expand_items(prompts, args.iterations)
    texts = [it["prompt"] for it in items]
    tools.log(f"rubric_score: {len(prompts)} prompts -> {len(items)} items x {len(contestants)} models")
    answers = tools.answers(tools.load(contestants), texts, [args.seed + it["iteration"] for it in items])
    names = list(answers)
    tools.out.jsonl("answers.jsonl", ({**it, "answers": {n: [a[q] for a in answers[n]] for n in names}}
                                      for q, it in enumerate(items)))

    # pointwise: all answers of one item scored together (one batched judge call per item)
    crits, negative = criteria()
    scorer = make_pointwise(args, tools, jspec)
    raw = {n: [] for n in names}  # name -> list of (C,) raw points
    for q, prompt in enumerate(texts):
        flat = [(n, ans[q]) for n in names for ans in answers[n]]
        pts = scorer.score(prompt, [t for _, t in flat], crits)
        for (n, _), row in zip(flat, pts):
            raw[n].append(row)
        tools.log(f"scored item {q + 1}/{len(items)}")
    rubric_models = []
    for n in names:
        pts = invert_negative(np.asarray(raw[n]), negative)
        with np.errstate(all="ignore"):
            per_crit = np.nanmean(pts, axis=0) if np.isfinite(pts).any() else np.full(len(crits), np.nan)
        score = float(np.nanmean(pts)) if np.isfinite(pts).any() else float("nan")
        with np.errstate(all="ignore"):
            per_answer = np.nanmean(pts, axis=1)  # item-major: the items in order (each member's answer)
        rubric_models.append({"name": n, "score_20": score, "score_100": 5 * score,
                              "unreadable": float(np.isnan(pts).mean()),
                              "per_answer": [None if not np.isfinite(x) else float(x) for x in per_answer],
                              "per_criterion": {c.id: float(v) for c, v in zip(crits, per_crit)}})

    pairwise = None
    if len(names) >= 2:
        judge = tools.judge(jspec)
        rows = {k: [] for k in ("a", "b", "p_a", "prompt", "len_a", "len_b")}
        for q, prompt in enumerate(texts):
            flat = [(ci, ans[q]) for ci, n in enumerate(names) for ans in answers[n]]
            pairs = [(x, y) for x in range(len(flat)) for y in range(len(flat)) if flat[x][0] != flat[y][0]]
            p = judge.p_first(prompt, [t for _, t in flat], pairs, PAIRWISE).mean(axis=1)
            for (x, y), pa in zip(pairs, p):
                for k, v in zip(rows, (flat[x][0], flat[y][0], pa, q, word_count(flat[x][1]),
                                       word_count(flat[y][1]))):
                    rows[k].append(v)
            tools.log(f"compared item {q + 1}/{len(items)}")
        comps = {k: np.asarray(v) for k, v in rows.items()}
        np.savez(tools.out.path("comparisons.npz"), margin=margins(comps["p_a"]), **comps)
        pairwise = rate_margins(comps, names, bootstrap_reps=args.bootstrap, seed=args.seed)

    diag = diagnostics(answers, texts)
    title = args.title or f"rubric_score: {', '.join(names)} ({len(items)} item{'s' if len(items) != 1 else ''})"
    result = {"title": title, "rubric": {"models": sorted(rubric_models, key=lambda m: -np.nan_to_num(
        m["score_20"], nan=-1)), "criteria": [{"id": c.id, "name": c.name, "negative": bool(neg)}
                                             for c, neg in zip(crits, negative)]},
              "pairwise": pairwise, "diagnostics": diag,
              "eval": {"suite": "rubric_score", "data": os.path.abspath(data), "prompts": len(prompts),
                       "items": len(items), "iterations": args.iterations, "judge": jspec, "seed": args.seed,
                       "judge_questions": getattr(args, "judge_questions", "better"),
                       "score_mode": args.score_mode, "generation": {"max_new_tokens": args.max_new_tokens,
                                                                     "temperature": args.temperature}}}
    tools.out.json("results.json", result)

    mat = np.array([[m["per_criterion"][c.id] for c in crits] for m in rubric_models])
    heatmap(mat, names, [c.id + (" (inv)" if neg else "") for c, neg in zip(crits, negative)],
            tools.out.path("rubric_scores.png"), title="criterion scores (0-20, negatives inverted)",
            vmax=MAX_POINTS)
    md = [f"# {title}", "", "## Rubric scores", "",
          f"Mean of {len(crits)} criteria scored 0-20 ({len(NEGATIVE)} negative ones inverted, 20 - s); "
          "x5 gives 0-100.", "", "| model | score (0-20) | score (0-100) | unreadable |", "|---|---:|---:|---:|"]
    md += [f"| {m['name']} | {fmt(m['score_20'])} | {fmt(m['score_100'], 1)} | {100 * m['unreadable']:.0f}% |"
           for m in result["rubric"]["models"]]
    md += ["", "![criterion scores](rubric_scores.png)", "", "| criterion | " + " | ".join(names) + " |",
           "|---|" + "---:|" * len(names)]
    md += [f"| {c.name}{' (inverted)' if neg else ''} | " + " | ".join(fmt(v) for v in mat[:, j]) + " |"
           for j, (c, neg) in enumerate(zip(crits, negative))]
    md.append("")
    if pairwise is not None:
        plot_ratings(pairwise, tools.out.path("ratings.png"), title="margin-weighted Bradley-Terry")
        plot_win_rates(pairwise, tools.out.path("win_rates.png"), title="margin-weighted win rates")
        md += ["## Pairwise (margin-weighted)", "",
               f"Margins from |p - 0.5|: < {MARGIN_THRESHOLDS[0]} '+', < {MARGIN_THRESHOLDS[1]} '++', else '+++'; "
               "outcome 0.5 + m/6 fitted by Bradley-Terry.", "", "| model | " + " | ".join(
                   margin_label(k) for k in range(MAX_MARGIN, -MAX_MARGIN - 1, -1)) + " |",
               "|---|" + "---:|" * (2 * MAX_MARGIN + 1)]
        md += [f"| {n} | " + " | ".join(str(c[margin_label(k)]) for k in range(MAX_MARGIN, -MAX_MARGIN - 1, -1))
               + " |" for n, c in pairwise["margin_counts"].items()]
        body = render_markdown(pairwise, title="x", images={"ratings.png": "ratings.png",
                                                            "win_rates.png": "win_rates.png"})
        md += ["", *["#" + line if line.startswith("## ") else line for line in body.split("\n")[2:]]]
    md += diagnostics_md(diag)
    tools.out.text("report.md", "\n".join(md))
    print("\n".join(md[:md.index("![criterion scores](rubric_scores.png)")]), flush=True)
    if pairwise is not None:
        print("\n".join(f"{m['name']:<20} elo {fmt(m['elo'], 0):>6}" for m in pairwise["models"]), flush=True)
    return result
