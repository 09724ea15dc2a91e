"""How accurate is the LLM constraint verifier? Precision and recall of catching violations, per constraint type.

Why. "RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing" (arXiv 2508.18642) guarantees that
every rollout which breaks a constraint ends with a negative advantage -- but only for the rollouts its
verifier *says* break one. A verifier that misses violations lets them through unpunished (low recall); one
that flags good rollouts pushes the policy away from them (low precision). The paper never measures either,
so this study does, for our own verifier (`rubric_jax.judge.verify.verify_batch`: the frozen self-judge
reading the constraint sentence, both label orders averaged), with "violation" as the positive class.

Two parts, each scored per type and overall (n, accuracy, precision, recall, mean p_pass on passing and on
failing items; per mode, the verifier's label_bias and order_agreement):

  (b) fuzzy         the 144 hand-labelled items of `evals/data/fuzzy_constraints.jsonl` (12 types): the
                    constraints only an LLM can check, where the verifier's accuracy is the whole story;
  (a) programmatic  the 7 bundled kinds a program checks (word_count, line_count, must_include, must_exclude,
                    no_commas, starts_with, ends_with), built from the same prompts and responses, half kept
                    and half broken, labelled by `check_program`. The LLM reads the kind's sentence
                    (`Constraint.text`), as it does under `reward.verifier=llm` or "both": how much worse than
                    the program it is tells whether routing these kinds to the LLM is ever sensible.

    python -m evals.verifier_study --out=/tmp/verifier_study [--model=smollm2-135m-instruct]
        [--modes=logit,hard] [--limit=N] [--seed=0]

Writes DIR/verifier_study.json (every figure, per-item p_pass, model, counts, seconds) and
DIR/verifier_study.md (one table per part), and prints the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import re
import sys
import time
from typing import Callable, Sequence

import numpy as np

from evals.fuzzy_items import TYPES as FUZZY_TYPES
from evals.fuzzy_items import load_fuzzy_items
from rubric_jax.judge.verify import verify_batch
from rubric_jax.rewards.rlmr import verifier_precision_recall
from rubric_jax.verifiers.constraints import Constraint, check_program, parse_constraint
from rubric_jax.verifiers.text_units import count_words, split_sentences
from evals.report import write_json
from rubric_jax.models.loading import DEFAULT_MODEL

__all__ = ["KINDS", "MODES", "ProgrammaticItem", "format_table", "main", "programmatic_items", "run_study",
           "score"]

log = logging.getLogger("evals.verifier_study")

MODES = ("logit", "hard")
KINDS = ("word_count", "line_count", "must_include", "must_exclude", "no_commas", "starts_with", "ends_with")
PER_KIND = 20  # 7 x 20 = 140 programmatic items, 10 kept and 10 broken per kind

# Frequent long words that would make must_include / must_exclude trivially about function words.
_STOP = frozenset("about after again always before being could every first might never other their there these "
                  "those under until where which while would should through".split())
_WORD = re.compile(r"[A-Za-z]+")
_TAIL_PUNCT = ".!?\"'\u201d\u2019)"


@dataclasses.dataclass(frozen=True)
class ProgrammaticItem:
    """A fuzzy item's prompt and response (or, for no_commas, its comma-free copy) with a programmatic
    constraint it keeps (`passes`) or breaks; `source` is the fuzzy item's id."""

    id: str
    type: str
    prompt: str
    response: str
    constraint: Constraint
    passes: bool
    source: str


def _content_words(text: str) -> list[str]:
    seen = dict.fromkeys(w.lower() for w in _WORD.findall(text) if len(w) >= 5 and w.lower() not in _STOP)
    return list(seen)


def _all_words(text: str) -> set[str]:
    # \w+ runs, as check_program's whole-word match sees them
    return {w.lower() for w in re.findall(r"\w+", text)}


def _n_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def _last_word(text: str) -> str:
    return re.findall(r"\w+(?:['\u2019-]\w+)*", text)[-1]


def _opens(text: str, start: str) -> bool:
    return " ".join(text.split()).startswith(" ".join(start.split()))


def _interleave(items: list, type_of: Callable, pass_of: Callable) -> list:
    """Round-robin over types, alternating labels within each type (types starting on alternate labels), so
    that any prefix -- what --limit keeps -- spreads over types and holds both labels."""
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(type_of(it), []).append(it)
    queues = []
    for g, members in enumerate(groups.values()):
        yes = [it for it in members if pass_of(it)]
        no = [it for it in members if not pass_of(it)]
        first, second = (yes, no) if g % 2 == 0 else (no, yes)
        merged = []
        for i in range(max(len(first), len(second))):
            merged += first[i:i + 1] + second[i:i + 1]
        queues.append(merged)
    out = []
    for r in range(max((len(q) for q in queues), default=0)):
        out += [q[r] for q in queues if r < len(q)]
    return out


def _build(kind: str, keep: bool, src, rng: np.random.Generator, pool: list[str], firsts: list[str],
           lasts: list[str]) -> tuple[dict, str]:
    """(constraint object, response) of one item: `keep` says whether the response is meant to keep it."""
    resp = src.response
    if kind == "word_count":
        n = count_words(resp)
        if keep:  # a range around the real count, rounded to fives as a prompt writer would
            lo, hi = 5 * ((n - int(rng.integers(3, 30))) // 5), 5 * -(-(n + int(rng.integers(3, 30))) // 5)
            return {"type": kind, "min": max(lo, 0), "max": hi}, resp
        # a range clearly off the real count: a length a writer could have been asked for, but not this one
        gap, width = int(rng.integers(10, 40)), 5 * int(rng.integers(2, 8))
        if n - gap - width >= 10 and rng.random() < 0.5:
            hi = 5 * ((n - gap) // 5)
            return {"type": kind, "min": hi - width, "max": hi}, resp
        lo = 5 * -(-(n + gap) // 5)
        return {"type": kind, "min": lo, "max": lo + width}, resp
    if kind == "line_count":
        n = _n_lines(resp)
        m = n if keep else max(1, n + int(rng.choice([-3, -2, -1, 1, 2, 3])))
        m = m if keep or m != n else n + 1
        return {"type": kind, "min": m, "max": m}, resp
    if kind in ("must_include", "must_exclude"):
        present = _content_words(resp)
        there = _all_words(resp)
        absent = [w for w in pool if w not in there]
        want_present = keep == (kind == "must_include")
        word = str(rng.choice(present if want_present else absent))
        return {"type": kind, "words": [word]}, resp
    if kind == "no_commas":
        # kept: the same response with its commas taken out; broken: as written (every fuzzy response has one)
        return {"type": kind}, (resp.replace(",", "").replace("\uff0c", "") if keep else resp)
    if kind == "starts_with":
        sents = [s.strip() for s in split_sentences(resp) if s.strip()]
        if keep:
            return {"type": kind, "text": sents[0]}, resp
        # half the broken ones use a sentence the response does contain, just not first: position matters
        if len(sents) > 1 and rng.random() < 0.5 and not _opens(resp, sents[1]):
            return {"type": kind, "text": sents[1]}, resp
        # another response's opening, unless this response happens to open the same way ("Oyez!")
        others = [f for f in firsts if not _opens(resp, f)]
        return {"type": kind, "text": str(rng.choice(others))}, resp
    if kind == "ends_with":
        last = _last_word(resp)
        if keep:
            return {"type": kind, "text": last}, resp
        # a word of the response itself, or another response's last word; never a tail of the real last word
        own = [w for w in _WORD.findall(resp) if len(w) >= 4 and not last.endswith(w)]
        cands = own if own and rng.random() < 0.5 else [w for w in lasts if not last.endswith(w)]
        return {"type": kind, "text": str(rng.choice(cands))}, resp
    raise ValueError(f"unknown programmatic kind {kind!r}")


def programmatic_items(fuzzy_items: Sequence, seed: int = 0, per_kind: int = PER_KIND) -> list[ProgrammaticItem]:
    """`per_kind` items for each of the 7 bundled programmatic kinds, half kept and half broken, built from the
    fuzzy items' prompts and responses; deterministic in `seed`. Every label is `check_program`'s, and a
    construction whose label differs from the intended one raises (the builder, not the data, is wrong)."""
    items = list(fuzzy_items)
    if not items:
        return []
    rng = np.random.default_rng(seed)
    pool = sorted({w for it in items for w in _content_words(it.response)})
    firsts = sorted({split_sentences(it.response)[0].strip() for it in items})
    lasts = sorted({_last_word(it.response) for it in items})
    per_kind = min(per_kind, len(items))
    out = []
    for k, kind in enumerate(KINDS):
        order = rng.permutation(len(items))
        if kind == "line_count":  # few responses have several lines: use those first, or every count is 1
            order = sorted(order, key=lambda i: _n_lines(items[i].response) == 1)
        for j, i in enumerate(order[:per_kind]):
            src, keep = items[i], (j + k) % 2 == 0
            obj, response = _build(kind, keep, src, rng, pool, firsts, lasts)
            c = parse_constraint(obj, where=f"{kind} from {src.id}")
            label = check_program(c, response)
            if label != keep:
                raise AssertionError(f"{kind} from {src.id}: meant to {'keep' if keep else 'break'} "
                                     f"{c.text!r}, but check_program says {label}")
            out.append(ProgrammaticItem(f"{kind}-{j:02d}-{src.id}", kind, src.prompt, response, c, label, src.id))
    return _interleave(out, lambda it: it.type, lambda it: it.passes)


def _mean(x: np.ndarray):
    return float(x.mean()) if x.size else None


def _figures(p: np.ndarray, t: np.ndarray) -> dict:
    pred_violate, true_violate = p < 0.5, ~t
    precision, recall = verifier_precision_recall(pred_violate, true_violate)
    return {"n": int(t.size), "n_fail": int(true_violate.sum()), "n_flagged": int(pred_violate.sum()),
            "accuracy": float((pred_violate == true_violate).mean()) if t.size else None,
            "precision": float(precision), "recall": float(recall),
            "mean_p_pass_on_pass": _mean(p[t]), "mean_p_pass_on_fail": _mean(p[~t])}


def score(pred_pass, true_pass, types) -> dict:
    """Verifier figures per type and overall: {"by_type": {type: figures}, "overall": figures}.

    pred_pass: the verifier's p_pass per item (booleans count as 1 / 0; the verdict is p_pass >= 1/2, as in
    `VerifyResult.passes`); true_pass: the gold labels; types: each item's type. Figures: n, n_fail,
    n_flagged (predicted violations), accuracy, precision and recall of detecting violations
    (`verifier_precision_recall`: an empty denominator gives 1.0), mean p_pass on pass and on fail items
    (None where a type has none).
    """
    p = np.asarray(pred_pass, dtype=np.float64).reshape(-1)
    t = np.asarray(true_pass, dtype=bool).reshape(-1)
    types = list(types)
    if not p.size == t.size == len(types):
        raise ValueError(f"{p.size} predictions, {t.size} labels, {len(types)} types: one of each per item")
    ty = np.asarray(types, dtype=object)
    by_type = {name: _figures(p[ty == name], t[ty == name]) for name in dict.fromkeys(types)}
    return {"by_type": by_type, "overall": _figures(p, t)}


def _text(it) -> str:
    return it.constraint.text if isinstance(it.constraint, Constraint) else it.constraint


def _verify_part(judge, items: list, mode: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """One verify_batch call over all items (one response and one constraint per entry; the engine packs
    and prefix-shares them): p_pass (N,), p_orders (N, 2) and the mode's order statistics."""
    res = verify_batch(judge, [it.prompt for it in items], [[it.response] for it in items],
                       [[_text(it)] for it in items], mode=mode)
    p = np.array([float(r.p_pass[0, 0]) for r in res])
    orders = np.array([np.asarray(r.p_orders[0, 0], dtype=np.float64) for r in res]).reshape(-1, 2)
    both = np.isfinite(orders).all(-1)
    # each entry holds exactly one (response, constraint), so averaging the per-entry bias weighs all alike
    stats = {"label_bias": float(np.mean([r.metrics["label_bias"] for r in res])),
             "order_agreement": float(((orders[both, 0] >= 0.5) == (orders[both, 1] >= 0.5)).mean())
             if both.any() else None,
             "invalid_fraction": float(np.mean([not bool(r.valid[0, 0]) for r in res]))}
    return p, orders, stats


def run_study(judge, fuzzy_items: Sequence | None = None, *, modes: Sequence[str] = MODES, limit: int = 0,
              seed: int = 0) -> dict:
    """Both parts in every mode: {"fuzzy"|"programmatic": {"counts", "items", mode: {"by_type", "overall",
    "seconds"}}, "seconds"}. limit > 0 keeps the first `limit` items of each part (spread over types)."""
    t_start = time.perf_counter()
    fuzzy = list(load_fuzzy_items() if fuzzy_items is None else fuzzy_items)
    parts = {"fuzzy": _interleave(fuzzy, lambda it: it.type, lambda it: it.passes),
             "programmatic": programmatic_items(fuzzy, seed)}
    out: dict = {}
    for part, items in parts.items():
        items = items[:limit] if limit > 0 else items
        truth = np.array([it.passes for it in items], dtype=bool)
        types = [it.type for it in items]
        rows = [{"id": it.id, "type": it.type, "constraint": _text(it), "label": "pass" if it.passes else "fail"}
                for it in items]
        block = {"counts": {"items": len(items), "pass": int(truth.sum()), "fail": int((~truth).sum())},
                 "items": rows}
        for mode in modes:
            log.info("%s / %s: verifying %d items (one batched call) ...", part, mode, len(items))
            t0 = time.perf_counter()
            p, orders, stats = _verify_part(judge, items, mode) if items else (np.zeros(0), np.zeros((0, 2)), {})
            figures = score(p, truth, types)
            figures["overall"].update(stats)
            figures["seconds"] = round(time.perf_counter() - t0, 2)
            block[mode] = figures
            for row, pi, po in zip(rows, p, orders):
                row[f"p_pass_{mode}"] = round(float(pi), 4)
                row[f"p_orders_{mode}"] = [None if not math.isfinite(v) else round(float(v), 4) for v in po]
            o = figures["overall"]
            log.info("%s / %s: %.1f s; accuracy %.3f, precision %.3f, recall %.3f", part, mode,
                     figures["seconds"], o["accuracy"] or 0.0, o["precision"], o["recall"])
        out[part] = block
    out["seconds"] = round(time.perf_counter() - t_start, 2)
    return out


def _cell(v) -> str:
    return "–" if v is None else f"{v:.2f}"


def format_table(result: dict, part: str, modes: Sequence[str]) -> str:
    """The part's markdown table: one row per type and an "all" row; per mode accuracy, precision, recall.
    A precision of 1.00 marked * flagged nothing (1.0 by convention, not a measurement)."""
    block = result[part]
    head = "| type | n | " + " | ".join(f"{m} acc | {m} prec | {m} rec" for m in modes) + " |"
    lines = [head, "|---|---:|" + "---:|" * (3 * len(modes))]
    names = list(block[modes[0]]["by_type"]) if modes else []
    order = [t for t in (FUZZY_TYPES if part == "fuzzy" else KINDS) if t in names] + \
            [t for t in names if t not in FUZZY_TYPES and t not in KINDS]
    for name in order + ["all"]:
        cells = []
        for m in modes:
            f = block[m]["overall"] if name == "all" else block[m]["by_type"][name]
            prec = _cell(f["precision"]) + ("*" if f["n_flagged"] == 0 else "")
            cells += [_cell(f["accuracy"]), prec, _cell(f["recall"])]
        n = block[modes[0]]["overall" if name == "all" else "by_type"]
        n = n["n"] if name == "all" else n[name]["n"]
        lines.append(f"| {'**all**' if name == 'all' else name} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _summary_lines(result: dict, part: str, modes: Sequence[str]) -> list[str]:
    lines = []
    for m in modes:
        o = result[part][m]["overall"]
        lines.append(f"- {m}: mean p_pass {_cell(o['mean_p_pass_on_pass'])} on pass items, "
                     f"{_cell(o['mean_p_pass_on_fail'])} on fail items; label_bias {o.get('label_bias', 0.0):+.3f}, "
                     f"order_agreement {_cell(o.get('order_agreement'))}; {result[part][m]['seconds']:.0f} s")
    return lines


def render_markdown(result: dict, modes: Sequence[str]) -> str:
    out = [f"# LLM constraint verifier accuracy ({result.get('model', 'judge')})", "",
           "Precision and recall of detecting violations (a violation is the positive class); the verdict is "
           "p_pass >= 0.5 with both label orders averaged. * = nothing flagged (precision 1.0 by convention).", ""]
    for part, title in (("programmatic", "(a) Programmatic constraints (labels from check_program)"),
                        ("fuzzy", "(b) Fuzzy constraints (hand labels)")):
        c = result[part]["counts"]
        out += [f"## {title}", "", f"{c['items']} items ({c['pass']} pass, {c['fail']} fail).", "",
                format_table(result, part, modes), ""] + _summary_lines(result, part, modes) + [""]
    out += [f"Seed {result.get('seed', 0)}, limit {result.get('limit') or 'none'}, {result['seconds']:.0f} s in all.",
            ""]
    return "\n".join(out)


def build_judge(model: str):
    """The in-process self-judge for `model` (an embedded name or a checkpoint path)."""
    import jax.numpy as jnp

    from rubric_jax.judge import Judge
    from rubric_jax.models.loading import load_model
    from rubric_jax.models.tokenizer import load_tokenizer

    return Judge(load_model(model, dtype=jnp.float32), load_tokenizer(model))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.verifier_study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="judge model: embedded name or checkpoint path")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of logit,hard")
    p.add_argument("--limit", type=int, default=0, help="first N items of each part (0 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the programmatic item set")
    return p


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes) or args.limit < 0:
        print(f"error: --modes must be a comma-separated subset of {','.join(MODES)}; --limit >= 0",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    t0 = time.perf_counter()
    log.info("loading judge %s ...", args.model)
    judge = build_judge(args.model)
    result = run_study(judge, modes=modes, limit=args.limit, seed=args.seed)
    result = {"model": args.model, "model_id": getattr(judge, "model_id", None), "modes": modes,
              "seed": args.seed, "limit": args.limit,
              "counts": {part: result[part]["counts"] for part in ("fuzzy", "programmatic")},
              **result, "seconds_verifying": result["seconds"], "seconds": round(time.perf_counter() - t0, 2)}
    os.makedirs(args.out, exist_ok=True)
    paths = {name: os.path.join(args.out, name) for name in ("verifier_study.json", "verifier_study.md")}
    write_json(paths["verifier_study.json"], result)
    md = render_markdown(result, modes)
    with open(paths["verifier_study.md"], "w", encoding="utf-8") as f:
        f.write(md)
    print(md)
    print(f"wrote {paths['verifier_study.json']} and {paths['verifier_study.md']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
