"""IFEval: how often a model follows verifiable instructions, prompt- and instruction-level, strict and loose.

The benchmark of "Instruction-Following Evaluation for Large Language Models" (Zhou et al., 2023,
arXiv:2311.07911): each prompt carries 1-3 instructions a program can check ("fewer than 120 words", "wrap
the answer in double quotes", "exactly 3 bullet points"), and a response is scored per instruction. Four
figures come out:

  - prompt-level accuracy: the share of prompts whose every instruction is followed;
  - instruction-level accuracy: the share of all instructions followed (pooled over prompts);

each strict (the response as written) and loose (the response also passes if a variant without its first
and/or last line, or without markdown `*`, does; it forgives "Sure, here you go:" preambles and emphasis).
The verdicts are `rubric_jax.verifiers.follow_instructions`, our implementation of the 25 checkers, tested
against lm-eval's IFEval task; this module only reads data, matches responses to prompts and aggregates.

Two ways in:

  score existing responses (IFEval's own evaluation step):
    python -m evals.ifeval --input_data=INPUT.jsonl --responses=RESPONSES.jsonl --out=DIR
  generate with any model spec of evals.run (cached answers), then score:
    python -m evals.ifeval --models=name=spec,name2=spec2 [--input_data=FILE] --out=DIR [--limit=N]
      [--max_new_tokens=256] [--temperature=0] [--seed=0] [--bootstrap=10000] [--bootstrap_seed=0]

Input lines are IFEval's public format `{"key", "prompt", "instruction_id_list", "kwargs"}` (one kwargs
dict per instruction; null values are ignored, as IFEval does; an id listed twice with different kwargs is two
instructions, as in IFEval's own file and scorer); the default input is the bundled
`evals/data/ifeval_prompts.jsonl` (132 prompts written for this project, every instruction id at least 6
times). Response lines are `{"prompt", "response"}`, matched to inputs by prompt text. Outputs:
`eval_results_strict.jsonl` / `eval_results_loose.jsonl` (one line per prompt: prompt,
instruction_id_list, response, follow_all_instructions, follow_instruction_list; in DIR when scoring a
responses file, in DIR/<name>/ per model), and `ifeval.json` / `ifeval.md` in DIR with the accuracy table
(one row per model) and per-instruction-id and per-category accuracies. Generation is greedy by default,
as in the paper's evaluation, so a model's score does not depend on sampling luck.

With two or more models, every model after the first is compared with the first (`--models=base=...,
trained=...`: trained - base) on each of the four accuracies: the difference and its paired percentile
bootstrap interval (95%, `--bootstrap` resamples, seed `--bootstrap_seed`), which redraws prompts with
replacement and scores both models on the same draw, so what the prompts have in common (some are hard for
any model) cancels out of the spread. Instruction-level differences are ratios over the drawn prompts' own
instructions, as the accuracy itself pools them. They are in ifeval.json under "comparisons", in ifeval.md
and in the printed table; `paired_bootstrap` and `scores_from_results` recompute them from any two models'
eval_results files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evals.report import write_json
from rubric_jax.verifiers import INSTRUCTION_IDS, follow_instructions, validate_kwargs

DEFAULT_INPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ifeval_prompts.jsonl")
ACCURACIES = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")
COLUMNS = ("prompt strict", "inst strict", "prompt loose", "inst loose")
CONFIDENCE = 0.95
# The fields of IFEval's own eval_results_*.jsonl lines, in its order, so that its tooling reads ours.
RESULT_FIELDS = ("instruction_id_list", "prompt", "response", "follow_all_instructions", "follow_instruction_list")


class IFEvalError(ValueError):
    """Bad input data or responses; the message names the file and line (or the prompt)."""


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One IFEval prompt. `where` ("file:line") prefixes every error about it."""

    key: int
    prompt: str
    instruction_id_list: list[str]
    kwargs: list[dict]
    where: str = ""


# ---------------------------------------------------------------------------------------------
# Reading


def _json_lines(path: str):
    """(line number, parsed object) for each non-blank line; a line that is not a JSON object is an error."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise IFEvalError(f"{path}:{lineno}: not valid JSON ({e})") from None
            if not isinstance(obj, dict):
                raise IFEvalError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _example(rec: Mapping[str, Any], where: str) -> InputExample:
    """An InputExample from one input record, every field and every instruction's kwargs checked."""
    missing = [k for k in ("key", "prompt", "instruction_id_list", "kwargs") if k not in rec]
    if missing:
        raise IFEvalError(f"{where}: missing field(s) {missing}")
    key, prompt, ids, kwargs = rec["key"], rec["prompt"], rec["instruction_id_list"], rec["kwargs"]
    if isinstance(key, bool) or not isinstance(key, int):
        raise IFEvalError(f"{where}: 'key' must be an integer, got {key!r}")
    if not isinstance(prompt, str) or not prompt.strip():
        raise IFEvalError(f"{where}: 'prompt' must be a non-empty string")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise IFEvalError(f"{where}: 'instruction_id_list' must be a non-empty list of strings")
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise IFEvalError(f"{where}: 'kwargs' must be a list with one dict per instruction ({len(ids)})")
    # An id may stand twice with different kwargs (Google's input_data.jsonl does this 17 times, e.g.
    # capital_word_frequency "less than 10" and "at least 1"): each entry is its own instruction, as in the
    # reference evaluation, which scores the list entry by entry.
    for iid, kw in zip(ids, kwargs):
        # ConstraintError names the instruction and the kwarg; `where` adds the file and line.
        validate_kwargs(iid, kw, where=where)
    return InputExample(key, prompt, list(ids), [dict(k or {}) for k in kwargs], where)


def load_input_data(path: str) -> list[InputExample]:
    """IFEval input lines -> InputExamples, in file order. Keys and prompts must be unique (responses are
    matched by prompt text); every instruction id and kwargs dict must pass `validate_kwargs`."""
    out: list[InputExample] = []
    keys: dict[int, int] = {}
    prompts: dict[str, int] = {}
    for lineno, rec in _json_lines(path):
        ex = _example(rec, f"{path}:{lineno}")
        if ex.key in keys:
            raise IFEvalError(f"{path}:{lineno}: key {ex.key} already used on line {keys[ex.key]}")
        if ex.prompt in prompts:
            raise IFEvalError(f"{path}:{lineno}: the same prompt as line {prompts[ex.prompt]}")
        keys[ex.key], prompts[ex.prompt] = lineno, lineno
        out.append(ex)
    if not out:
        raise IFEvalError(f"{path}: no prompts")
    return out


def load_responses(path: str) -> dict[str, str]:
    """`{"prompt", "response"}` lines -> {prompt: response}. A prompt answered twice with different
    responses is an error (which one to score would be a guess); an exact repeat is harmless."""
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, rec in _json_lines(path):
        for field in ("prompt", "response"):
            if field not in rec:
                raise IFEvalError(f"{path}:{lineno}: missing field {field!r}")
            if not isinstance(rec[field], str):
                raise IFEvalError(f"{path}:{lineno}: {field!r} must be a string, got {rec[field]!r}")
        prompt, response = rec["prompt"], rec["response"]
        if prompt in out and out[prompt] != response:
            raise IFEvalError(f"{path}:{lineno}: a second, different response to the prompt of line "
                              f"{first_line[prompt]}")
        out[prompt] = response
        first_line.setdefault(prompt, lineno)
    return out


# ---------------------------------------------------------------------------------------------
# Scoring


def _as_example(rec, i: int) -> InputExample:
    if isinstance(rec, InputExample):
        return rec
    if not isinstance(rec, Mapping):
        raise IFEvalError(f"inputs[{i}]: expected an InputExample or a mapping, got {type(rec).__name__}")
    return _example(rec, f"inputs[{i}]")


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _breakdown(rows_strict: list[dict], rows_loose: list[dict], group) -> dict[str, dict]:
    """Instruction-level accuracy per group(instruction id), strict and loose, with the count n."""
    strict: dict[str, list[bool]] = {}
    loose: dict[str, list[bool]] = {}
    for rs, rl in zip(rows_strict, rows_loose):
        for iid, s, lo in zip(rs["instruction_id_list"], rs["follow_instruction_list"], rl["follow_instruction_list"]):
            strict.setdefault(group(iid), []).append(s)
            loose.setdefault(group(iid), []).append(lo)
    return {g: {"n": len(strict[g]), "strict": _mean(strict[g]), "loose": _mean(loose[g])} for g in strict}


def _id_order(iid: str) -> tuple[int, str]:
    return (INSTRUCTION_IDS.index(iid) if iid in INSTRUCTION_IDS else len(INSTRUCTION_IDS), iid)


def evaluate(inputs: Sequence[InputExample | Mapping], responses_by_prompt: Mapping[str, str], *,
             where: str = "") -> dict:
    """Scores one response per input prompt.

    Returns {"n_prompts", "n_instructions", the four ACCURACIES (fractions in [0, 1]), "per_instruction"
    ({id: {"n", "strict", "loose"}}, ids in IFEval's registry order), "per_category" (the same per id prefix,
    e.g. "keywords"), "eval_results_strict" and "eval_results_loose" (one row per prompt, RESULT_FIELDS)}.
    Every input prompt needs a response (a missing one is an error naming the prompt; `where`, e.g. the
    responses file, is added to that message); responses to other prompts are ignored, as IFEval does.
    """
    examples = [_as_example(r, i) for i, r in enumerate(inputs)]
    if not examples:
        raise IFEvalError("no prompts to evaluate")
    rows: dict[str, list[dict]] = {"strict": [], "loose": []}
    for ex in examples:
        if ex.prompt not in responses_by_prompt:
            origin = f" (input {ex.where})" if ex.where else ""
            raise IFEvalError(f"{where + ': ' if where else ''}no response for the prompt of key {ex.key}{origin}: "
                              f"{_clip(ex.prompt)!r}")
        response = responses_by_prompt[ex.prompt]
        if not isinstance(response, str):
            raise IFEvalError(f"{where + ': ' if where else ''}the response for key {ex.key} is not a string")
        for mode in ("strict", "loose"):
            follows = follow_instructions(ex.instruction_id_list, ex.kwargs, response, prompt=ex.prompt,
                                          loose=mode == "loose", where=ex.where)
            rows[mode].append({"instruction_id_list": list(ex.instruction_id_list), "prompt": ex.prompt,
                               "response": response, "follow_all_instructions": all(follows),
                               "follow_instruction_list": follows})
    out: dict[str, Any] = {"n_prompts": len(examples),
                           "n_instructions": sum(len(ex.instruction_id_list) for ex in examples)}
    for mode in ("strict", "loose"):
        out[f"prompt_level_{mode}_acc"] = _mean(r["follow_all_instructions"] for r in rows[mode])
        out[f"inst_level_{mode}_acc"] = _mean(v for r in rows[mode] for v in r["follow_instruction_list"])
    per_id = _breakdown(rows["strict"], rows["loose"], lambda iid: iid)
    out["per_instruction"] = {iid: per_id[iid] for iid in sorted(per_id, key=_id_order)}
    per_cat = _breakdown(rows["strict"], rows["loose"], lambda iid: iid.split(":", 1)[0])
    first = {}  # categories in the registry order of their first id
    for iid in sorted(per_id, key=_id_order):
        first.setdefault(iid.split(":", 1)[0], len(first))
    out["per_category"] = {c: per_cat[c] for c in sorted(per_cat, key=first.__getitem__)}
    out["eval_results_strict"], out["eval_results_loose"] = rows["strict"], rows["loose"]
    return out


def _clip(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def summary(result: dict) -> dict:
    """`evaluate`'s result without the per-prompt rows (what goes into ifeval.json)."""
    return {k: v for k, v in result.items() if not k.startswith("eval_results_")}


def pool(summaries: list[dict]) -> dict:
    """Several members' summaries on the same inputs (a '+' contestant) -> one, every figure their mean:
    with equal prompt sets that is exactly the accuracy over all their (member, prompt) pairs."""
    if len(summaries) == 1:
        return dict(summaries[0])
    out = {"n_prompts": summaries[0]["n_prompts"], "n_instructions": summaries[0]["n_instructions"],
           "members": len(summaries)}
    for acc in ACCURACIES:
        out[acc] = _mean(s[acc] for s in summaries)
    for part in ("per_instruction", "per_category"):
        out[part] = {g: {"n": v["n"], **{m: _mean(s[part][g][m] for s in summaries) for m in ("strict", "loose")}}
                     for g, v in summaries[0][part].items()}
    return out


# ---------------------------------------------------------------------------------------------
# Paired comparison


def prompt_scores(rows_strict: Sequence[Mapping], rows_loose: Sequence[Mapping]) -> dict[str, Any]:
    """Per-prompt figures of one model's eval_results rows (strict and loose, same prompts in the same order):
    for each of ACCURACIES a numerator per prompt (prompt level: 1 if every instruction is followed; instruction
    level: the number followed), "n_instructions" (the instruction-level denominator per prompt) and
    "prompts" (their texts, which a comparison checks are the other model's)."""
    if len(rows_strict) != len(rows_loose):
        raise IFEvalError(f"{len(rows_strict)} strict rows but {len(rows_loose)} loose rows")
    out = {"n_instructions": np.asarray([len(r["follow_instruction_list"]) for r in rows_strict], np.float64)}
    for mode, rows in (("strict", rows_strict), ("loose", rows_loose)):
        out[f"prompt_level_{mode}_acc"] = np.asarray([bool(r["follow_all_instructions"]) for r in rows], np.float64)
        out[f"inst_level_{mode}_acc"] = np.asarray([sum(map(bool, r["follow_instruction_list"])) for r in rows],
                                                   np.float64)
    out["prompts"] = [r["prompt"] for r in rows_strict]
    return out


def pool_scores(members: Sequence[dict]) -> dict:
    """A '+' contestant's per-prompt figures: each numerator averaged over its members (same prompts), so the
    pooled accuracy is `pool`'s."""
    if len(members) == 1:
        return members[0]
    out = {k: np.mean([m[k] for m in members], axis=0) for k in ACCURACIES}
    out["n_instructions"], out["prompts"] = members[0]["n_instructions"], members[0]["prompts"]
    return out


def scores_from_results(directory: str) -> dict:
    """`prompt_scores` of the eval_results_strict.jsonl / eval_results_loose.jsonl this module wrote in
    `directory` (a model's folder of --out)."""
    rows = {}
    for mode in ("strict", "loose"):
        rows[mode] = [rec for _, rec in _json_lines(os.path.join(directory, f"eval_results_{mode}.jsonl"))]
    return prompt_scores(rows["strict"], rows["loose"])


def paired_bootstrap(base: Mapping, other: Mapping, *, resamples: int = 10_000, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict[str, dict]:
    """other - base on each of ACCURACIES, with a paired percentile bootstrap interval.

    base, other: `prompt_scores` (or `pool_scores`) of two models on the same prompts in the same order. Each
    of `resamples` replicates draws the prompts' indices with replacement once and scores both models on that
    draw: prompt level, the mean of the per-prompt differences; instruction level, the difference in followed
    instructions over the drawn prompts' instruction count. Returns {accuracy: {"difference", "low", "high"}}
    (fractions; low and high nan with resamples = 0); the same seed gives the same intervals."""
    n = len(base["n_instructions"])
    if n == 0 or len(other["n_instructions"]) != n or not np.array_equal(base["n_instructions"],
                                                                          other["n_instructions"]):
        raise IFEvalError("a paired comparison needs both models scored on the same prompts")
    if "prompts" in base and "prompts" in other and list(base["prompts"]) != list(other["prompts"]):
        raise IFEvalError("a paired comparison needs both models' prompts in the same order")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n)) if resamples > 0 else None
    q = (1.0 - confidence) / 2.0
    out = {}
    for acc in ACCURACIES:
        diff = np.asarray(other[acc], np.float64) - np.asarray(base[acc], np.float64)
        den = base["n_instructions"] if acc.startswith("inst_") else np.ones(n)
        entry = {"difference": float(diff.sum() / den.sum()), "low": float("nan"), "high": float("nan")}
        if idx is not None:
            reps = diff[idx].sum(axis=1) / den[idx].sum(axis=1)
            entry["low"], entry["high"] = (float(x) for x in np.quantile(reps, [q, 1.0 - q]))
        out[acc] = entry
    return out


def comparisons(scores: Mapping[str, dict], *, resamples: int, seed: int,
                confidence: float = CONFIDENCE) -> dict[str, dict]:
    """{"<name> - <first>": paired_bootstrap(first, name)} for every model after the first, in order."""
    names = list(scores)
    return {f"{n} - {names[0]}": paired_bootstrap(scores[names[0]], scores[n], resamples=resamples, seed=seed,
                                                  confidence=confidence) for n in names[1:]}


# ---------------------------------------------------------------------------------------------
# Writing


def write_eval_results(result: dict, directory: str) -> list[str]:
    """eval_results_strict.jsonl and eval_results_loose.jsonl (IFEval's per-prompt output) in `directory`."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for mode in ("strict", "loose"):
        path = os.path.join(directory, f"eval_results_{mode}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for row in result[f"eval_results_{mode}"]:
                f.write(json.dumps({k: row[k] for k in RESULT_FIELDS}, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


def _pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:.1f}"


def _md_name(name: str) -> str:
    return str(name).replace("|", "\\|")


def accuracy_table(models: Mapping[str, dict]) -> str:
    """The markdown table: one row per model, the four accuracies in percent."""
    lines = ["| model | " + " | ".join(COLUMNS) + " | prompts |",
             "|---|" + "---:|" * (len(COLUMNS) + 1)]
    for name, s in models.items():
        lines.append(f"| {_md_name(name)} | " + " | ".join(_pct(s[a]) for a in ACCURACIES)
                     + f" | {s['n_prompts']} |")
    return "\n".join(lines)


def _signed_pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:+.1f}"


def comparison_table(comps: Mapping[str, dict]) -> str:
    """The markdown table of `comparisons`: per pair, each accuracy's difference in points and its interval."""
    lines = ["| difference | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for name, c in comps.items():
        cells = [f"{_signed_pct(c[a]['difference'])} [{_signed_pct(c[a]['low'])}, {_signed_pct(c[a]['high'])}]"
                 for a in ACCURACIES]
        lines.append(f"| {_md_name(name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _breakdown_table(models: Mapping[str, dict], part: str, label: str) -> str:
    names = list(models)
    groups: list[str] = []
    for s in models.values():
        groups += [g for g in s[part] if g not in groups]
    if part == "per_instruction":
        groups.sort(key=_id_order)
    lines = [f"| {label} | n | " + " | ".join(f"{_md_name(n)} strict | {_md_name(n)} loose" for n in names) + " |",
             "|---|---:|" + "---:|---:|" * len(names)]
    for g in groups:
        n = next(s[part][g]["n"] for s in models.values() if g in s[part])
        cells = []
        for name in names:
            v = models[name][part].get(g)
            cells += [_pct(v["strict"]), _pct(v["loose"])] if v else ["–", "–"]
        lines.append(f"| {g} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(models: Mapping[str, dict], *, title: str, meta: Mapping[str, Any],
                    comps: Mapping[str, dict] | None = None) -> str:
    out = [f"# {title}", "",
           "Accuracy in percent. Prompt-level: every instruction of a prompt followed; instruction-level: "
           "share of all instructions followed. Loose also accepts the response without its first and/or last "
           "line or without markdown `*` (Zhou et al., 2023, arXiv:2311.07911).", "",
           accuracy_table(models), ""]
    if comps:
        boot = meta.get("bootstrap", {})
        out += ["## Paired differences (points)", "",
                f"Each model minus the first on the same prompts, with the {100 * boot.get('confidence', CONFIDENCE):g}%"
                f" paired bootstrap interval ({boot.get('resamples', '?')} resamples of the prompts, seed "
                f"{boot.get('seed', '?')}). An interval that excludes 0 is a difference the prompts support.", "",
                comparison_table(comps), ""]
    out += ["## Per instruction (instruction-level accuracy, %)", "",
           _breakdown_table(models, "per_instruction", "instruction"), "",
           "## Per category (instruction-level accuracy, %)", "",
           _breakdown_table(models, "per_category", "category"), "",
           "## Settings", "", "```json", json.dumps(meta, indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(out)


def write_report(models: Mapping[str, dict], out_dir: str, *, title: str, meta: Mapping[str, Any],
                 comps: Mapping[str, dict] | None = None) -> dict:
    """ifeval.json ({"eval": meta, "models": {name: summary}}, and "comparisons" when `comps` has any) and
    ifeval.md in out_dir; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"ifeval.json": os.path.join(out_dir, "ifeval.json"), "ifeval.md": os.path.join(out_dir, "ifeval.md")}
    report: dict[str, Any] = {"eval": dict(meta), "models": dict(models)}
    if comps:
        report["comparisons"] = dict(comps)
    write_json(paths["ifeval.json"], report)
    with open(paths["ifeval.md"], "w", encoding="utf-8") as f:
        f.write(render_markdown(models, title=title, meta=meta, comps=comps))
    return paths


def write_responses(prompts: Sequence[str], answers: Sequence[str], path: str) -> None:
    """IFEval's input_response_data format, so a run's answers can be rescored with --responses."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p, a in zip(prompts, answers):
            f.write(json.dumps({"prompt": p, "response": a}, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# The two modes


def _inputs(args) -> tuple[str, list[InputExample]]:
    path = args.input_data or DEFAULT_INPUT
    inputs = load_input_data(path)
    if args.limit:
        if args.limit > len(inputs):
            raise IFEvalError(f"--limit={args.limit}: {path} has only {len(inputs)} prompts")
        inputs = inputs[:args.limit]
    return path, inputs


def score_responses(args) -> dict:
    """--responses: score a responses file against the inputs; eval_results_*.jsonl go straight into --out."""
    path, inputs = _inputs(args)
    responses = load_responses(args.responses)
    result = evaluate(inputs, responses, where=args.responses)
    unmatched = len(set(responses) - {ex.prompt for ex in inputs})
    if unmatched:
        print(f"note: {unmatched} response(s) in {args.responses} answer no input prompt and are ignored",
              file=sys.stderr)
    write_eval_results(result, args.out)
    name = args.name or os.path.splitext(os.path.basename(args.responses))[0] or "responses"
    meta = {"mode": "responses", "input_data": os.path.abspath(path), "responses": os.path.abspath(args.responses),
            "prompts": len(inputs)}
    models = {name: summary(result)}
    write_report(models, args.out, title=args.title or f"IFEval: {name} ({len(inputs)} prompts)", meta=meta)
    return {"eval": meta, "models": models}


def _check_name(name: str) -> None:
    # Each model gets a directory named after it, which must stay inside --out.
    if name in (".", "..") or "/" in name or os.sep in name:
        raise IFEvalError(f"--models: {name!r} cannot be a directory name; choose another name= for it")


def generate_and_score(args) -> dict:
    """--models: every member of every contestant answers every prompt (cached, see evals.generate), each
    contestant's answers are scored into --out/<name>/, and one table compares them."""
    from evals.generate import GenSettings, generate_answers
    from evals.models import load_contestants, parse_models

    path, inputs = _inputs(args)
    contestants = parse_models(args.models, base=args.base or None)
    for c in contestants:
        _check_name(c.name)
    cache_dir = os.path.abspath(os.path.expanduser(args.cache_dir))
    settings = GenSettings.from_args(args)
    members = load_contestants(contestants, cache_dir, announce=True)
    prompts = [ex.prompt for ex in inputs]
    models: dict[str, dict] = {}
    scores: dict[str, dict] = {}
    for name, ms in members.items():
        per_member, member_scores = [], []
        for k, m in enumerate(ms):
            answers = generate_answers(m, prompts, seed=args.seed, settings=settings, cache_dir=cache_dir,
                                       batch_size=args.batch_size, progress=not args.quiet,
                                       desc=f"{name}[{k}]" if len(ms) > 1 else name)
            result = evaluate(inputs, dict(zip(prompts, answers)))
            # A pooled contestant keeps each member's per-prompt files apart: they answer the same prompts.
            sub = os.path.join(args.out, name, f"member{k}") if len(ms) > 1 else os.path.join(args.out, name)
            write_eval_results(result, sub)
            write_responses(prompts, answers, os.path.join(sub, "responses.jsonl"))
            per_member.append(summary(result))
            member_scores.append(prompt_scores(result["eval_results_strict"], result["eval_results_loose"]))
        models[name] = pool(per_member)
        scores[name] = pool_scores(member_scores)
    meta = {"mode": "models", "input_data": os.path.abspath(path), "prompts": len(inputs), "seed": args.seed,
            "generation": settings.key(),
            "models": {n: [{"spec": m.spec.label, "kind": m.spec.kind, "fingerprint": m.fingerprint} for m in ms]
                       for n, ms in members.items()}}
    comps = {}
    if len(scores) > 1:
        meta["bootstrap"] = {"resamples": args.bootstrap, "seed": args.bootstrap_seed, "confidence": CONFIDENCE}
        comps = comparisons(scores, resamples=args.bootstrap, seed=args.bootstrap_seed)
    title = args.title or f"IFEval: {', '.join(models)} ({len(inputs)} prompts)"
    write_report(models, args.out, title=title, meta=meta, comps=comps)
    return {"eval": meta, "models": models, "comparisons": comps}


# ---------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.ifeval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input_data", default="", help="IFEval input JSONL (default: the bundled prompt set)")
    p.add_argument("--responses", default="", help="score this {prompt, response} JSONL (no generation)")
    p.add_argument("--name", default="", help="--responses: the table's row name (default: the file's name)")
    p.add_argument("--models", default="", help="name=spec,name=spec: generate, then score (specs as evals.run)")
    p.add_argument("--base", default="", help="base model of PEFT adapters that do not name one")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--limit", type=int, default=0, help="first N prompts (0 = all)")
    p.add_argument("--max_new_tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (IFEval's setting)")
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=10_000,
                   help="--models with 2+ models: paired bootstrap resamples of the prompts (0: no interval)")
    p.add_argument("--bootstrap_seed", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=8, help="prompts per sampler call")
    p.add_argument("--cache_dir", default=os.environ.get("RUBRIC_JAX_EVAL_CACHE", "~/.cache/rubric_jax/evals"),
                   help="answers and file hashes are cached here (shared with evals.run)")
    p.add_argument("--title", default="")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from evals.models import ModelSpecError

    if bool(args.models) == bool(args.responses):
        print("error: give exactly one of --models (generate and score) or --responses (score a file)",
              file=sys.stderr)
        return 2
    if args.limit < 0 or args.max_new_tokens < 1 or args.batch_size < 1 or args.temperature < 0 or args.bootstrap < 0:
        print("error: --limit >= 0, --max_new_tokens >= 1, --batch_size >= 1, --temperature >= 0, --bootstrap >= 0",
              file=sys.stderr)
        return 2
    try:
        report = generate_and_score(args) if args.models else score_responses(args)
    except (ModelSpecError, ValueError, FileNotFoundError) as e:  # IFEvalError and ConstraintError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(accuracy_table(report["models"]), flush=True)
    if report.get("comparisons"):
        print(comparison_table(report["comparisons"]), flush=True)
    print(f"(written to {os.path.join(args.out, 'ifeval.md')} and ifeval.json)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
