"""elements: stories that must weave in N drawn elements, graded on craft and on each element's integration
(in the manner of L. Mazur's required-elements writing benchmark, as used to evaluate "Rubric Curriculum RL:
Exploiting the Generation-Verification Gap in Non-Verifiable Domains").

Element lists (evals/data/story_elements.json, our own words) hold entries for ten kinds: character, object,
core concept, attribute, action, method, setting, timeframe, motivation, tone. Story k draws N distinct kinds
(`--elements`, default 6; 10 = all) and one entry of each with numpy's generator seeded by (--seed, k), so a
story's elements depend only on the seed and its index (adding stories never changes earlier ones). The prompt
lists the elements and asks for a story of --min_words..--max_words words.

Each story is graded by the judge (evals.scorers, 0..10 each, generate mode) on eight craft questions (CRAFT)
and one integration question per drawn element ("is <element> woven in organically, not just named?"). With
g_{s,q} the grade of question q on story s (unreadable grades skipped):

    question mean_q   = mean over the model's stories that have q of g_{s,q}
                        (integration questions pooled by element kind, e.g. "int:setting"),
    story score_s     = mean over the questions of story s of g_{s,q},
    model score       = mean over stories of score_s (0-10);   craft / integration = the same over those only.

Writes into --out: results.json, report.md, answers.jsonl, heatmap.png (model x question means). Per-model text
diagnostics (rubric_jax.rl.diagnostics.text_diagnostics) and the share of stories inside the word range too.
"""

from __future__ import annotations

import json
import os

import numpy as np

from evals.generate import word_count
from evals.scorers import scale_criterion
from evals.suites.rubric_score import (DATA_DIR, add_scorer_args, diagnostics, diagnostics_md, fmt, heatmap,
                                       make_pointwise)
from evals.tools import SuiteTools

DEFAULT_ELEMENTS = os.path.join(DATA_DIR, "story_elements.json")
KINDS = ("character", "object", "core concept", "attribute", "action", "method", "setting", "timeframe",
         "motivation", "tone")
MAX_POINTS = 10

# (id, name, what the grader checks); our own wording of the eight craft questions
CRAFT = [
    ("q1_character", "Character and motivation",
     "Are the characters distinct, and do their actions follow from wants and reasons the reader believes?"),
    ("q2_plot", "Plot structure and coherence",
     "Does the story have a clear arc (opening, turn, close) in which each event follows sensibly from the last?"),
    ("q3_setting", "Setting and atmosphere",
     "Does the place feel specific and lived in, and does it set a mood that serves the story?"),
    ("q4_impact", "Impact and development",
     "Does something change by the end, and does the story leave a feeling or thought that lingers?"),
    ("q5_originality", "Authenticity and originality",
     "Does the story take a fresh angle, avoiding stock situations and predictable turns?"),
    ("q6_theme", "Theme and tone",
     "Do the story's ideas hang together, and is its tone controlled and suited to them?"),
    ("q7_voice", "Voice and point of view",
     "Is the narrating voice distinctive, and is the point of view handled consistently?"),
    ("q8_prose", "Prose",
     "Is the line-by-line writing clear, precise and varied, free of errors and padding?"),
]


def load_elements(path: str = DEFAULT_ELEMENTS) -> dict[str, list[str]]:
    """kind -> entries; ValueError naming the kind when one is missing, empty or has non-string entries."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    for k in KINDS:
        v = data.get(k) if isinstance(data, dict) else None
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x.strip() for x in v):
            raise ValueError(f"{path}: element kind {k!r} must be a non-empty list of non-empty strings")
    return {k: list(data[k]) for k in KINDS}


def draw_elements(lists: dict[str, list[str]], n: int, seed: int, story: int) -> list[tuple[str, str]]:
    """n (kind, entry) pairs with n distinct kinds, in KINDS order, drawn by default_rng([seed, story])."""
    if not 1 <= n <= len(KINDS):
        raise ValueError(f"--elements must be in 1..{len(KINDS)}, got {n}")
    rng = np.random.default_rng([int(seed), int(story)])
    kinds = sorted(rng.choice(len(KINDS), size=n, replace=False).tolist())
    return [(KINDS[k], lists[KINDS[k]][int(rng.integers(len(lists[KINDS[k]])))]) for k in kinds]


def story_prompt(elements: list[tuple[str, str]], min_words: int, max_words: int) -> str:
    lines = [f"- {kind}: {entry}" for kind, entry in elements]
    return ("Write a complete short story of " f"{min_words} to {max_words} words. It must make real use of every "
            "one of the following elements; each should matter to the story, not just be mentioned in passing.\n\n"
            + "\n".join(lines) + "\n\nWrite only the story (a title is optional).")


def questions(elements: list[tuple[str, str]]):
    """(criteria for one story, their question ids): the eight craft questions, then one per element."""
    crits, ids = [], []
    for qid, name, check in CRAFT:
        crits.append(scale_criterion(qid, name, check, MAX_POINTS, "very poor", "outstanding, publishable"))
        ids.append(qid)
    for kind, entry in elements:
        qid = "int:" + kind
        crits.append(scale_criterion(
            f"{qid}:{entry}", f"Integration of the {kind}",
            f"The story was required to use this {kind}: \"{entry}\". How organically is it woven in: does it "
            "shape events, characters or meaning, rather than being named once or bolted on?", MAX_POINTS,
            "absent, or only named in passing", "essential to the story and handled with skill"))
        ids.append(qid)
    return crits, ids


def question_columns(n_kinds_used: set[str]) -> list[str]:
    return [q for q, _, _ in CRAFT] + ["int:" + k for k in KINDS if k in n_kinds_used]


def summarise(grades: dict[str, list[dict[str, float]]]) -> dict:
    """grades[model][story] = {question id: grade or NaN} -> per-model means (module docstring formulas)."""
    out = {}
    for name, stories in grades.items():
        per_q: dict[str, list[float]] = {}
        story_all, story_craft, story_int = [], [], []
        for g in stories:
            for q, v in g.items():
                per_q.setdefault(q, []).append(v)
            for acc, keep in ((story_all, lambda q: True), (story_craft, lambda q: not q.startswith("int:")),
                              (story_int, lambda q: q.startswith("int:"))):
                vals = [v for q, v in g.items() if keep(q) and np.isfinite(v)]
                acc.append(float(np.mean(vals)) if vals else float("nan"))

        def m(xs):
            xs = [x for x in xs if np.isfinite(x)]
            return float(np.mean(xs)) if xs else float("nan")

        out[name] = {"score": m(story_all), "craft": m(story_craft), "integration": m(story_int),
                     "per_question": {q: m(v) for q, v in per_q.items()},
                     "per_story": [None if not np.isfinite(x) else x for x in story_all],
                     "unreadable": float(np.mean([not np.isfinite(v) for g in stories for v in g.values()]))}
    return out


def add_args(group) -> None:
    group.add_argument("--elements", type=int, default=6, help="required elements per story (1..10)")
    group.add_argument("--stories", type=int, default=20, help="stories per model")
    group.add_argument("--min_words", type=int, default=400, help="lower end of the requested word range")
    group.add_argument("--max_words", type=int, default=600, help="upper end of the requested word range")
    group.add_argument("--elements_file", default="", help="element lists (default: evals/data/story_elements.json)")
    add_scorer_args(group)


def run(args, tools=None) -> dict:
    tools = tools or SuiteTools(args)
    if args.stories < 1 or not 0 < args.min_words <= args.max_words:
        raise ValueError("--stories must be >= 1 and 0 < --min_words <= --max_words")
    contestants = tools.contestants()
    jspec = tools.judge_spec()
    lists = load_elements(args.elements_file or DEFAULT_ELEMENTS)
    draws = [draw_elements(lists, args.elements, args.seed, k) for k in range(args.stories)]
    prompts = [story_prompt(d, args.min_words, args.max_words) for d in draws]
    tools.log(f"elements: {args.stories} stories x {args.elements} elements x {len(contestants)} models")
    answers = tools.answers(tools.load(contestants), prompts)
    names = list(answers)
    tools.out.jsonl("answers.jsonl", ({"story": k, "elements": [list(e) for e in d], "prompt": p,
                                       "answers": {n: [a[k] for a in answers[n]] for n in names}}
                                      for k, (d, p) in enumerate(zip(draws, prompts))))

    scorer = make_pointwise(args, tools, jspec)
    grades: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for k, (d, p) in enumerate(zip(draws, prompts)):
        crits, qids = questions(d)
        flat = [(n, ans[k]) for n in names for ans in answers[n]]
        pts = scorer.score(p, [t for _, t in flat], crits)
        for (n, _), row in zip(flat, pts):
            grades[n].append(dict(zip(qids, (float(v) for v in row))))
        tools.log(f"graded story {k + 1}/{len(prompts)}")
    summary = summarise(grades)
    for n in names:
        wc = [word_count(t) for ans in answers[n] for t in ans]
        summary[n]["in_word_range"] = float(np.mean([args.min_words <= w <= args.max_words for w in wc]))
        summary[n]["mean_words"] = float(np.mean(wc))

    cols = question_columns({kind for d in draws for kind, _ in d})
    mat = np.array([[summary[n]["per_question"].get(q, float("nan")) for q in cols] for n in names])
    heatmap(mat, names, cols, tools.out.path("heatmap.png"), title="mean grade per question (0-10)",
            vmax=MAX_POINTS)
    diag = diagnostics(answers, prompts)
    title = args.title or f"elements: {', '.join(names)} ({args.stories} stories, {args.elements} elements)"
    result = {"title": title, "models": [{"name": n, **summary[n]} for n in
                                         sorted(names, key=lambda n: -np.nan_to_num(summary[n]["score"], nan=-1))],
              "questions": cols, "diagnostics": diag,
              "stories": [{"story": k, "elements": [list(e) for e in d]} for k, d in enumerate(draws)],
              "eval": {"suite": "elements", "stories": args.stories, "elements": args.elements, "judge": jspec,
                       "seed": args.seed, "word_range": [args.min_words, args.max_words],
                       "score_mode": args.score_mode,
                       "generation": {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature}}}
    tools.out.json("results.json", result)

    md = [f"# {title}", "", "## Scores (0-10)", "",
          "Story score = mean of its questions; model score = mean over stories. Craft = the eight craft "
          "questions; integration = one question per required element.", "",
          "| model | score | craft | integration | in word range | mean words | unreadable |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    md += [f"| {m['name']} | {fmt(m['score'])} | {fmt(m['craft'])} | {fmt(m['integration'])} | "
           f"{100 * m['in_word_range']:.0f}% | {m['mean_words']:.0f} | {100 * m['unreadable']:.0f}% |"
           for m in result["models"]]
    md += ["", "## Per question", "", "![heatmap](heatmap.png)", "", "| question | " + " | ".join(names) + " |",
           "|---|" + "---:|" * len(names)]
    md += [f"| {q} | " + " | ".join(fmt(v) for v in mat[:, j]) + " |" for j, q in enumerate(cols)]
    md.append("")
    md += diagnostics_md(diag)
    tools.out.text("report.md", "\n".join(md))
    print("\n".join(md[:md.index("## Per question")]), flush=True)
    return result
