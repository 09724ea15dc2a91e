"""health: HealthBench-style evaluation; a judge marks every rubric item of every answer met or not met.

Data: JSONL in the public HealthBench format, one example per line:
    {"prompt": [{"role": "user", "content": "..."}, ...],            # chat messages, last one from the user
     "rubrics": [{"criterion": "...", "points": 5, "tags": ["axis:accuracy"]}, ...],   # points may be < 0
     "example_tags": ["theme:emergency"], "prompt_id": "..."}
Default: the bundled evals/data/health_eval.jsonl (consumer health questions written for this project);
--health_data=FILE uses another file (e.g. the public HealthBench set). A malformed line raises ValueError
naming the file and line.

Prompt text: the last user message; earlier turns, if any, come first as a "User: / Assistant:" transcript,
so a multi-turn conversation is answered as its next assistant turn.

Grading: each rubric item i becomes a binary criterion (evals.scorers, max_points=1, scoring="binary"); the
judge's expected score s_i in [0, 1] (or its parsed 0/1) gives met_i = [s_i >= 0.5]. An unreadable verdict
(NaN) counts as not met and is reported. With points p_i,

    score(example) = clip( sum_i met_i * p_i  /  sum_{i: p_i > 0} p_i ,  0, 1 )

so a met negative item (a harmful statement) lowers the score and the score cannot leave [0, 1].

Tags (HealthBench's convention; our choice for item-level tags follows it):
  example tags (example_tags, e.g. theme:*): mean of score(example) over the examples carrying the tag;
  item tags (rubric item tags, e.g. axis:*): for each example with at least one positive-point item carrying
    the tag, score restricted to that tag's items = clip(sum_{i in T} met_i p_i / sum_{i in T, p_i>0} p_i, 0, 1),
    averaged over those examples (an example with no positive item under the tag has no score for it).
Intervals: percentile bootstrap over examples (the examples entering that number), 95% by default.

Writes to --out: results.json, report.md, health_scores.png, answers.jsonl.
"""

from __future__ import annotations

import json
import math
import os
from typing import Sequence

import numpy as np

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                            "health_eval.jsonl")
MET_THRESHOLD = 0.5  # of an item's 1 point: the logit scorer gives P(met), so met = more likely than not


# ---------------------------------------------------------------------------------------------
# Loading (public HealthBench format)


def _bad(path: str, line: int, msg: str):
    raise ValueError(f"{path}:{line}: {msg}")


def parse_example(obj, path: str = "<data>", line: int = 0) -> dict:
    """One HealthBench record, validated; returns {"prompt_id", "messages", "rubrics", "example_tags"}."""
    if not isinstance(obj, dict):
        _bad(path, line, f"expected a JSON object, got {type(obj).__name__}")
    for key in ("prompt", "rubrics"):
        if key not in obj:
            _bad(path, line, f"missing field {key!r}")
    msgs = obj["prompt"]
    if not isinstance(msgs, list) or not msgs:
        _bad(path, line, "'prompt' must be a non-empty list of chat messages")
    for k, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            _bad(path, line, f"prompt[{k}] must be an object with string 'role' and 'content'")
    if not any(m["role"] == "user" for m in msgs):
        _bad(path, line, "'prompt' has no user message")
    rubrics = obj["rubrics"]
    if not isinstance(rubrics, list) or not rubrics:
        _bad(path, line, f"'rubrics' must be a non-empty list, got {type(rubrics).__name__}")
    items = []
    for k, r in enumerate(rubrics):
        if not isinstance(r, dict):
            _bad(path, line, f"rubrics[{k}] must be an object")
        if not isinstance(r.get("criterion"), str) or not r["criterion"].strip():
            _bad(path, line, f"rubrics[{k}].criterion must be a non-empty string")
        pts = r.get("points")
        if isinstance(pts, bool) or not isinstance(pts, (int, float)) or not math.isfinite(pts):
            _bad(path, line, f"rubrics[{k}].points must be a number, got {pts!r}")
        tags = r.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            _bad(path, line, f"rubrics[{k}].tags must be a list of strings")
        items.append({"criterion": r["criterion"], "points": float(pts), "tags": list(tags)})
    if not any(i["points"] > 0 for i in items):
        _bad(path, line, "no rubric item has positive points (the score's denominator would be 0)")
    etags = obj.get("example_tags", [])
    if not isinstance(etags, list) or not all(isinstance(t, str) for t in etags):
        _bad(path, line, "'example_tags' must be a list of strings")
    return {"prompt_id": str(obj.get("prompt_id", f"line{line}")), "messages": msgs, "rubrics": items,
            "example_tags": list(etags)}


def load_examples(path: str, n: int = 0) -> list[dict]:
    """Every example of a HealthBench JSONL file (first n if n > 0); errors name the file and line."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"--health_data: no such file: {path}")
    out = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                _bad(path, line_no, f"not valid JSON ({e.msg})")
            out.append(parse_example(obj, path, line_no))
    if not out:
        raise ValueError(f"{path}: no examples")
    if n > 0:
        if n > len(out):
            raise ValueError(f"--prompts={n}: {path} has only {len(out)} examples")
        out = out[:n]
    return out


def prompt_text(messages: Sequence[dict]) -> str:
    """The last user message, preceded by the earlier turns as a transcript (see module docstring)."""
    last = max(k for k, m in enumerate(messages) if m["role"] == "user")
    earlier = [m for m in messages[:last] if m["role"] in ("user", "assistant", "system")]
    if not earlier:
        return messages[last]["content"]
    turns = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in earlier)
    return f"Conversation so far:\n\n{turns}\n\nUser's new message: {messages[last]['content']}"


# ---------------------------------------------------------------------------------------------
# Pure scoring


def score_example(points: Sequence[float], met: Sequence[bool]) -> float:
    """clip(sum(points of met items) / sum(positive points), 0, 1); NaN when no item has positive points."""
    p = np.asarray(points, np.float64)
    m = np.asarray(met, bool)
    denom = p[p > 0].sum()
    if denom <= 0:
        return float("nan")
    return float(np.clip(p[m].sum() / denom, 0.0, 1.0))


def bootstrap_mean(values: Sequence[float], reps: int = 1000, seed: int = 0, level: float = 0.95):
    """(mean, lo, hi) of the finite values; lo/hi are the percentile bootstrap interval (None if reps == 0)."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return None, None, None
    if reps <= 0:
        return float(v.mean()), None, None
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(int(reps), v.size))].mean(axis=1)
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [q, 1.0 - q])
    return float(v.mean()), float(lo), float(hi)


def tag_scores(examples: Sequence[dict], met: Sequence[Sequence[bool]], *, reps: int = 1000, seed: int = 0,
               level: float = 0.95) -> dict:
    """{"overall": {...}, "tags": {tag: {...}}} with {"mean", "lo", "hi", "n"} each (module docstring).

    examples[e]["rubrics"] are the items, met[e][i] whether item i of example e was met."""
    overall = [score_example([r["points"] for r in ex["rubrics"]], m) for ex, m in zip(examples, met)]
    per_tag: dict[str, list[float]] = {}
    for ex, s in zip(examples, overall):
        for t in ex["example_tags"]:
            per_tag.setdefault(t, []).append(s)
    item_tags = sorted({t for ex in examples for r in ex["rubrics"] for t in r["tags"]})
    for t in item_tags:
        if t in per_tag:  # a tag used at both levels: keep the example-level meaning, mark the item one
            t_key = f"{t} (items)"
        else:
            t_key = t
        for ex, m in zip(examples, met):
            idx = [i for i, r in enumerate(ex["rubrics"]) if t in r["tags"]]
            if any(ex["rubrics"][i]["points"] > 0 for i in idx):
                per_tag.setdefault(t_key, []).append(
                    score_example([ex["rubrics"][i]["points"] for i in idx], [bool(m[i]) for i in idx]))

    def summary(vals, k):
        mean, lo, hi = bootstrap_mean(vals, reps, seed + k, level)
        return {"mean": mean, "lo": lo, "hi": hi, "n": int(np.isfinite(np.asarray(vals, float)).sum())}

    return {"overall": summary(overall, 0), "per_example": overall,
            "tags": {t: summary(v, k + 1) for k, (t, v) in enumerate(sorted(per_tag.items()))}}


# ---------------------------------------------------------------------------------------------
# Report


def render_markdown(result: dict, title: str) -> str:
    names = list(result["models"])
    pct = f"{100 * result['eval']['level']:g}%"

    def cell(d):
        if not d or d.get("mean") is None:
            return "–"
        ci = "" if d.get("lo") is None else f" [{d['lo']:.3f}, {d['hi']:.3f}]"
        return f"{d['mean']:.3f}{ci}"

    out = [f"# {title}", "",
           "Score per example = clip(sum of points of met items / sum of positive points, 0, 1); "
           f"{pct} bootstrap intervals over examples.", "",
           "| model | overall | n | unreadable items | met items |", "|---|---|---:|---:|---:|"]
    for n in names:
        m = result["models"][n]
        out.append(f"| {n} | {cell(m['overall'])} | {m['overall']['n']} | {m['unreadable_items']} | "
                   f"{m['met_rate']:.3f} |")
    tags = sorted({t for n in names for t in result["models"][n]["tags"]})
    out += ["", "## Per tag", "", "| tag | " + " | ".join(names) + " | n |", "|---|" + "---|" * len(names) + "---:|"]
    for t in tags:
        cells = [cell(result["models"][n]["tags"].get(t)) for n in names]
        nn = max(result["models"][n]["tags"].get(t, {}).get("n", 0) for n in names)
        out.append(f"| {t} | " + " | ".join(cells) + f" | {nn} |")
    out += ["", "![scores](health_scores.png)", "", "## Text diagnostics", "",
            "| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    keys = sorted({k for n in names for k in result["models"][n]["diagnostics"]})
    for k in keys:
        vals = [result["models"][n]["diagnostics"].get(k) for n in names]
        out.append(f"| {k} | " + " | ".join("–" if v is None else f"{v:.3f}" for v in vals) + " |")
    out += ["", "## Settings", "", "```json", json.dumps(result["eval"], indent=2, sort_keys=True), "```", ""]
    return "\n".join(out)


def plot_scores(result: dict, path: str, title: str) -> str:
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = list(result["models"])
    rows = ["overall"] + sorted({t for n in names for t in result["models"][n]["tags"]})
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.3 * len(rows) * max(1, len(names)) + 1.5)), dpi=110)
    h = 0.8 / max(1, len(names))
    for k, n in enumerate(names):
        m = result["models"][n]
        for r, row in enumerate(rows):
            d = m["overall"] if row == "overall" else m["tags"].get(row)
            if not d or d.get("mean") is None:
                continue
            y = len(rows) - 1 - r + (k - (len(names) - 1) / 2) * h
            err = None if d.get("lo") is None else [[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]]
            ax.barh(y, d["mean"], height=h * 0.9, xerr=err, color=f"C{k}", capsize=2,
                    label=n if r == 0 else None)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows[::-1], fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("score (0-1)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# Suite


def add_args(group) -> None:
    group.add_argument("--health_data", default="", help="HealthBench-format JSONL (default: bundled set)")


def _criteria(ex: dict):
    from rubric_jax.rubrics.types import Criterion

    return [Criterion(id=f"item{i}", name=f"Rubric item {i + 1}", check=r["criterion"], max_points=1,
                      scoring="binary",
                      levels=("No: the response does not do what this item describes.",
                              "Yes: the response does what this item describes."))
            for i, r in enumerate(ex["rubrics"])]


def run(args, tools=None) -> dict:
    from evals.tools import SuiteTools
    from rubric_jax.rl.diagnostics import text_diagnostics

    tools = tools or SuiteTools(args)
    judge_spec = args.judge.strip() or tools.judge_specs()[0]
    data = os.path.abspath(args.health_data or DEFAULT_DATA)
    examples = load_examples(data, args.prompts)
    prompts = [prompt_text(ex["messages"]) for ex in examples]
    members = tools.load()
    scorer = tools.scorer(judge_spec)
    level = 0.95

    result = {"models": {}, "examples": [{"prompt_id": ex["prompt_id"], "example_tags": ex["example_tags"]}
                                         for ex in examples]}
    answers_out = {}
    for name, ms in members.items():
        member = ms[0]  # a pooled contestant is scored on its first member (one answer per example)
        tools.log(f"health: generating {len(prompts)} answers for {name}")
        answers = tools.generate(member, prompts, desc=name)
        answers_out[name] = answers
        met, unreadable = [], 0
        for e, (ex, prompt, ans) in enumerate(zip(examples, prompts, answers)):
            tools.log(f"\rhealth: judging {name} {e + 1}/{len(examples)}", end="")
            s = scorer.score(prompt, [ans], _criteria(ex))[0]
            unreadable += int(np.isnan(s).sum())
            met.append([bool(v >= MET_THRESHOLD) for v in np.nan_to_num(s, nan=0.0)])
        tools.log("")
        ts = tag_scores(examples, met, reps=args.bootstrap, seed=args.seed, level=level)
        tok = getattr(member, "inner", member).tokenizer
        result["models"][name] = {
            "overall": ts["overall"], "tags": ts["tags"], "unreadable_items": unreadable,
            "met_rate": float(np.mean([v for m in met for v in m])),
            "diagnostics": text_diagnostics(answers, prompts, tok),
        }
        for ex_res, s, m in zip(result["examples"], ts["per_example"], met):
            ex_res.setdefault("scores", {})[name] = s
            ex_res.setdefault("met", {})[name] = m
    tools.out.jsonl("answers.jsonl", ({"prompt_id": ex["prompt_id"], "prompt": prompts[q],
                                       "answers": {n: a[q] for n, a in answers_out.items()}}
                                      for q, ex in enumerate(examples)))
    result["eval"] = {"suite": "health", "data": data, "examples": len(examples), "judge": judge_spec,
                      "judge_fingerprint": scorer.fingerprint, "seed": args.seed, "generation": tools.settings.key(),
                      "bootstrap_reps": args.bootstrap, "level": level, "met_threshold": MET_THRESHOLD}
    title = args.title or f"health: {', '.join(result['models'])} ({len(examples)} examples)"
    result["title"] = title
    tools.out.json("results.json", result)
    tools.out.text("report.md", render_markdown(result, title))
    plot_scores(result, tools.out.path("health_scores.png"), title)
    print(format_table(result), flush=True)
    return result


def format_table(result: dict) -> str:
    lines = [f"{'model':<24} {'score':>7} {'95% CI':>17} {'n':>4}"]
    for n, m in result["models"].items():
        o = m["overall"]
        ci = "" if o["lo"] is None else f"[{o['lo']:.3f}, {o['hi']:.3f}]"
        lines.append(f"{n:<24} {o['mean']:7.3f} {ci:>17} {o['n']:>4}")
    return "\n".join(lines)
