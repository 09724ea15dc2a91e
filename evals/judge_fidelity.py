"""Judge fidelity: does the frozen self-judge rank a coherent answer above a degraded copy of it?

Why. RcRL's reward is the self-judge's per-criterion win rate within a group, so a judge that cannot tell a
coherent answer from the same answer shuffled, cut off or padded gives a reward that is mostly noise. This
study measures that on pairs whose ranking is known (`evals/judge_pairs.py`: six degradation kinds, each
judged only on the criteria it is meant to hurt), with the real judge engine (`rubric_jax.judge.Judge`).

For each pair (better, worse) and each of its criteria:

  pairwise   both orders are judged (better first, then worse first). p_better is the engine's
             both-orders probability that the better answer wins (logit: the two readings averaged;
             sign: 1 or 0 by which side of 1/2 the logit average falls; hard and generate: the argmax
             verdict of each order, 1/2 when the orders disagree). The
             judgment is RIGHT when p_better > 0.5; exactly 0.5 (a tie) counts as WRONG.
  pointwise  each answer is scored on the criterion's 0..m scale (logit: expected score; sign, hard: argmax;
             generate: parsed). RIGHT when the better answer's score is strictly higher; a tie, or an
             unreadable score on either side, counts as WRONG.

Reported per mode and prompt type, per degradation kind, per criterion and for the tuning and held-out
kind groups separately (n counts (pair, criterion) judgments):

  accuracy       fraction RIGHT (ties wrong);  ties: fraction with p_better == 0.5 / equal scores;
  first_win      pairwise only: fraction of readable single-order readings that name the first-shown
                 answer (0.5 = no position preference; 1.0 = always the first);
  margin         mean of 2 p_better - 1 (pairwise) or (s_better - s_worse) / m (pointwise), in [-1, 1];
  order_agree    pairwise only: fraction whose two orders pick the same answer;
  invalid        fraction of unreadable readings (generate mode).

    python -m evals.judge_fidelity --out=DIR [--modes=logit,sign,hard,generate] [--prompts=pairwise,pointwise]
        [--kinds=tuning|held_out|all|KIND,...] [--limit=N] [--model=SPEC] [--variant=NAME] [--seed=0]

--limit N keeps the first N pairs of each kind. --variant picks a pairwise prompt from
`evals.judge_variants.VARIANTS` (pointwise always uses the engine's prompt). Writes DIR/judge_fidelity.json
(config, every figure, one row per judgment) and DIR/judge_fidelity.md; progress (pairs done / total,
ETA) goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from typing import Sequence

import numpy as np

from evals.judge_pairs import HELD_OUT_KINDS, KINDS, TUNING_KINDS, build_pairs, criteria_for, load_answers
from evals.report import write_json
from rubric_jax.models.loading import DEFAULT_MODEL

__all__ = ["MODES", "PROMPT_TYPES", "aggregate", "main", "pairwise_figures", "pointwise_figures", "render_markdown",
           "run_study"]

MODES = ("logit", "sign", "hard", "generate")
PROMPT_TYPES = ("pairwise", "pointwise")
GROUPS = ("tuning", "held_out")


# ---------------------------------------------------------------------------------------------
# Figures (pure)


def _mean(x) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()) if x.size else None


def pairwise_figures(p_better, pf_better_first, pf_worse_first) -> dict:
    """Figures of pairwise judgments. p_better: both-orders P(better wins) per judgment; pf_*: P(first-shown
    wins) in the order with the better / the worse answer first, NaN where that reading was unreadable."""
    p = np.asarray(p_better, dtype=np.float64).reshape(-1)
    a = np.asarray(pf_better_first, dtype=np.float64).reshape(-1)
    b = np.asarray(pf_worse_first, dtype=np.float64).reshape(-1)
    if not p.size == a.size == b.size:
        raise ValueError(f"{p.size} p_better, {a.size} and {b.size} first-position readings: one of each per judgment")
    readings = np.concatenate([a, b])
    ok = np.isfinite(readings)
    # a reading of exactly 1/2 names neither answer: half a first-position win
    first = np.where(readings[ok] > 0.5, 1.0, np.where(readings[ok] < 0.5, 0.0, 0.5))
    both = np.isfinite(a) & np.isfinite(b)
    return {"n": int(p.size), "accuracy": _mean(p > 0.5), "ties": _mean(p == 0.5), "margin": _mean(2 * p - 1),
            "first_win": _mean(first), "mean_p_first": _mean(readings[ok]),
            "order_agree": _mean((a[both] > 0.5) == (b[both] < 0.5)),
            "invalid": float(1 - ok.mean()) if readings.size else None}


def pointwise_figures(s_better, s_worse, max_points, valid_better=None, valid_worse=None) -> dict:
    """Figures of pointwise judgments: RIGHT iff both scores are readable and s_better > s_worse."""
    sb = np.asarray(s_better, dtype=np.float64).reshape(-1)
    sw = np.asarray(s_worse, dtype=np.float64).reshape(-1)
    m = np.broadcast_to(np.asarray(max_points, dtype=np.float64), sb.shape)
    vb = np.ones(sb.shape, bool) if valid_better is None else np.asarray(valid_better, bool).reshape(-1)
    vw = np.ones(sw.shape, bool) if valid_worse is None else np.asarray(valid_worse, bool).reshape(-1)
    if not sb.size == sw.size == vb.size == vw.size:
        raise ValueError("pointwise_figures: one score and validity flag per answer and judgment")
    ok = vb & vw
    return {"n": int(sb.size), "accuracy": _mean(ok & (sb > sw)), "ties": _mean(ok & (sb == sw)),
            "margin": _mean(np.where(ok, (sb - sw) / m, 0.0)), "first_win": None, "mean_p_first": None,
            "order_agree": None, "invalid": _mean(~ok)}


def _figures(rows: list[dict], prompt_type: str) -> dict:
    if prompt_type == "pairwise":
        return pairwise_figures([r["p_better"] for r in rows], [r["pf_better_first"] for r in rows],
                                [r["pf_worse_first"] for r in rows])
    return pointwise_figures([r["s_better"] for r in rows], [r["s_worse"] for r in rows],
                             [r["max_points"] for r in rows], [r["valid_better"] for r in rows],
                             [r["valid_worse"] for r in rows])


def aggregate(rows: list[dict], prompt_type: str) -> dict:
    """Figures overall, per group, per kind, per criterion and per (group, criterion). rows: one per judgment
    with keys kind, group, criterion and the prompt type's readings (see `_figures`)."""
    def by(key):
        out = {}
        for r in rows:
            out.setdefault(key(r), []).append(r)
        return {k: _figures(v, prompt_type) for k, v in out.items()}

    return {"overall": _figures(rows, prompt_type), "by_group": by(lambda r: r["group"]),
            "by_kind": by(lambda r: r["kind"]), "by_criterion": by(lambda r: r["criterion"]),
            "by_group_criterion": {f"{g}/{c}": f for (g, c), f in by(lambda r: (r["group"], r["criterion"])).items()}}


# ---------------------------------------------------------------------------------------------
# Judging


class Progress:
    """`[label] done/total pairs, elapsed, ETA` on stderr."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.t0 = label, total, time.perf_counter()

    def update(self, done: int) -> None:
        el = time.perf_counter() - self.t0
        eta = el / done * (self.total - done) if done else float("nan")
        print(f"[{self.label}] {done}/{self.total} pairs, {el:.0f} s elapsed, ETA {eta:.0f} s", file=sys.stderr,
              flush=True)


def _finite(x) -> float:
    return float(x) if x is not None and math.isfinite(float(x)) else float("nan")


def judge_pairwise(judges, pairs, crits, mode: str, batch: int = 8, label: str = "") -> list[dict]:
    """One row per (pair, criterion). judges: [(Judge, invert)]; an ensemble's readings are averaged."""
    rows, prog = [], Progress(label or f"pairwise/{mode}", len(pairs))
    for start in range(0, len(pairs), batch):
        chunk, cchunk = pairs[start:start + batch], crits[start:start + batch]
        per_judge = []
        for judge, invert in judges:
            res = judge.pairwise_batch([p.prompt for p in chunk], [[p.better, p.worse] for p in chunk], cchunk,
                                       mode=mode, pairing="all")
            vals = []
            for r in res:
                pf = np.where(r.valid, r.p_first, np.nan).astype(np.float64)
                pb, bf, wf = r.p[0, 1].astype(np.float64), pf[0, 1], pf[1, 0]
                # a "which is worse" reading names the loser: P(better wins) and P(first wins) flip
                vals.append((1 - pb, 1 - bf, 1 - wf) if invert else (pb, bf, wf))
            per_judge.append(vals)
        for k, (p, cs) in enumerate(zip(chunk, cchunk)):
            pb = np.mean([v[k][0] for v in per_judge], axis=0)
            with warnings.catch_warnings():  # all-NaN slice: an unreadable reading, reported as invalid
                warnings.simplefilter("ignore", RuntimeWarning)
                bf = np.nanmean([v[k][1] for v in per_judge], axis=0)
                wf = np.nanmean([v[k][2] for v in per_judge], axis=0)
            for c, cr in enumerate(cs):
                rows.append({"pair": p.id, "kind": p.kind, "group": p.group, "criterion": cr.id,
                             "p_better": float(pb[c]), "pf_better_first": _finite(bf[c]),
                             "pf_worse_first": _finite(wf[c])})
        prog.update(min(start + batch, len(pairs)))
    return rows


def judge_pointwise(judge, pairs, crits, mode: str, batch: int = 8, label: str = "") -> list[dict]:
    rows, prog = [], Progress(label or f"pointwise/{mode}", len(pairs))
    for start in range(0, len(pairs), batch):
        chunk, cchunk = pairs[start:start + batch], crits[start:start + batch]
        res = judge.pointwise_batch([p.prompt for p in chunk], [[p.better, p.worse] for p in chunk], cchunk,
                                    mode=mode)
        for p, cs, r in zip(chunk, cchunk, res):
            for c, cr in enumerate(cs):
                rows.append({"pair": p.id, "kind": p.kind, "group": p.group, "criterion": cr.id,
                             "s_better": float(r.scores[0, c]), "s_worse": float(r.scores[1, c]),
                             "valid_better": bool(r.valid[0, c]), "valid_worse": bool(r.valid[1, c]),
                             "max_points": int(r.max_points[c])})
        prog.update(min(start + batch, len(pairs)))
    return rows


def select_pairs(pairs, kinds: Sequence[str], limit: int = 0) -> list:
    out = []
    for kind in kinds:
        mine = [p for p in pairs if p.kind == kind]
        out += mine[:limit] if limit > 0 else mine
    return out


def run_study(judges, pairs, rubric, *, modes=("logit", "hard"), prompt_types=PROMPT_TYPES, batch: int = 8,
              on_block=None) -> dict:
    """{"results": {prompt type: {mode: aggregate + seconds}}, "rows": {prompt type: {mode: rows}}}.
    judges: [(Judge, invert)] (the first one also scores pointwise). on_block(study so far) runs after each
    (prompt type, mode) block, so a run stopped part-way keeps what it finished."""
    crits = [criteria_for(p, rubric) for p in pairs]
    results, rows = {}, {}
    for pt in prompt_types:
        for mode in modes:
            t0 = time.perf_counter()
            label = f"{pt}/{mode}"
            if pt == "pairwise":
                r = judge_pairwise(judges, pairs, crits, mode, batch, label)
            else:
                r = judge_pointwise(judges[0][0], pairs, crits, mode, batch, label)
            fig = aggregate(r, pt)
            fig["seconds"] = round(time.perf_counter() - t0, 1)
            results.setdefault(pt, {})[mode] = fig
            rows.setdefault(pt, {})[mode] = r
            o = fig["overall"]
            print(f"[{label}] accuracy {o['accuracy']:.3f} over {o['n']} judgments in {fig['seconds']:.0f} s",
                  file=sys.stderr, flush=True)
            if on_block is not None:
                on_block({"results": results, "rows": rows})
    return {"results": results, "rows": rows}


# ---------------------------------------------------------------------------------------------
# Report


def _c(v, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _row(name: str, f: dict, npairs: int | None) -> str:
    return (f"| {name} | {'' if npairs is None else npairs} | {f['n']} | {_c(f['accuracy'])} | {_c(f['ties'])} | "
            f"{_c(f['first_win'])} | {_c(f['margin'], 3)} | {_c(f['order_agree'])} | {_c(f['invalid'])} |")


def kind_table(fig: dict, counts: dict) -> str:
    lines = ["| kind | pairs | n | accuracy | ties | first_win | margin | order_agree | invalid |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for group, kinds in (("tuning", TUNING_KINDS), ("held_out", HELD_OUT_KINDS)):
        present = [k for k in kinds if k in fig["by_kind"]]
        lines += [_row(k, fig["by_kind"][k], counts.get(k)) for k in present]
        if present:
            lines.append(_row(f"**{group}**", fig["by_group"][group], sum(counts.get(k, 0) for k in present)))
    lines.append(_row("**all**", fig["overall"], sum(counts.values())))
    return "\n".join(lines)


def criterion_table(fig: dict) -> str:
    groups = [g for g in GROUPS if g in fig["by_group"]]
    lines = ["| criterion | " + " | ".join(f"{g} acc (n) | {g} margin" for g in groups) + " |",
             "|---|" + "---:|---:|" * len(groups)]
    for crit in fig["by_criterion"]:
        cells = []
        for g in groups:
            f = fig["by_group_criterion"].get(f"{g}/{crit}")
            cells += ["–", "–"] if f is None else [f"{_c(f['accuracy'])} ({f['n']})", _c(f["margin"], 3)]
        lines.append(f"| {crit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(result: dict) -> str:
    lines = ["| prompts | mode | tuning acc | held-out acc | all acc | first_win | margin | seconds |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for pt, per_mode in result["results"].items():
        for mode, fig in per_mode.items():
            g = fig["by_group"]
            lines.append(f"| {pt} | {mode} | {_c(g.get('tuning', {}).get('accuracy'))} | "
                         f"{_c(g.get('held_out', {}).get('accuracy'))} | {_c(fig['overall']['accuracy'])} | "
                         f"{_c(fig['overall']['first_win'])} | {_c(fig['overall']['margin'], 3)} | "
                         f"{fig['seconds']:.0f} |")
    return "\n".join(lines)


def render_markdown(result: dict) -> str:
    cfg = result["config"]
    out = [f"# Judge fidelity: {cfg['model']}, variant `{cfg['variant']}`", "",
           f"Variant: {cfg['variant_about']}. Kinds: {', '.join(cfg['kinds'])}; limit {cfg['limit'] or 'none'} "
           f"pairs per kind; seed {cfg['seed']}.", "",
           "A judgment is one (pair, criterion). Pairwise: right when the both-orders P(better wins) > 0.5, a tie "
           "(exactly 0.5) counts wrong. Pointwise: right when the better answer scores strictly higher, ties and "
           "unreadable scores count wrong. margin: mean 2p-1 (pairwise) or score gap / max (pointwise). "
           "first_win: share of single-order readings naming the first-shown answer.", "",
           "## Summary", "", summary_table(result), ""]
    for pt, per_mode in result["results"].items():
        for mode, fig in per_mode.items():
            out += [f"## {pt} / {mode}", "", kind_table(fig, result["counts"]), "", criterion_table(fig), ""]
    out += [f"{result['seconds']:.0f} s in all.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# CLI


def parse_kinds(spec: str) -> list[str]:
    spec = spec.strip()
    if spec in ("", "all"):
        return list(KINDS)
    if spec == "tuning":
        return list(TUNING_KINDS)
    if spec == "held_out":
        return list(HELD_OUT_KINDS)
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"--kinds: unknown {bad}; expected tuning, held_out, all or a subset of {KINDS}")
    return kinds


def _list(spec: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [x.strip() for x in spec.split(",") if x.strip()]
    if not items or any(x not in allowed for x in items):
        raise ValueError(f"--{what}: expected a comma-separated subset of {','.join(allowed)}, got {spec!r}")
    return items


def load_judge_model(spec: str):
    """(model, tokenizer) for any spec evals.models understands (embedded name, HF dir, GGUF, workdir, ...)."""
    from evals.models import LoadedMember, classify

    member = LoadedMember(classify(spec))
    return member.model, member.tokenizer


def build_parser() -> argparse.ArgumentParser:
    from evals.judge_variants import VARIANTS

    p = argparse.ArgumentParser(prog="python -m evals.judge_fidelity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--model", default=DEFAULT_MODEL, help="judge model spec (evals.models)")
    p.add_argument("--modes", default="logit,hard", help="comma-separated subset of logit,sign,hard,generate")
    p.add_argument("--prompts", default="pairwise,pointwise", help="comma-separated subset of pairwise,pointwise")
    p.add_argument("--kinds", default="all", help="tuning, held_out, all, or a comma-separated list of kinds")
    p.add_argument("--limit", type=int, default=0, help="first N pairs of each kind (0 = all)")
    p.add_argument("--variant", default="baseline", choices=sorted(VARIANTS), help="pairwise prompt variant")
    p.add_argument("--rubric", default="creative_writing", help="rubric the criteria come from")
    p.add_argument("--seed", type=int, default=0, help="seed of the degradations")
    p.add_argument("--batch", type=int, default=8, help="pairs per engine call")
    return p


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        modes = _list(args.modes, MODES, "modes")
        modes = [m for m in MODES if m in modes]  # logit first: sign and hard read its cached verdicts
        prompt_types = _list(args.prompts, PROMPT_TYPES, "prompts")
        kinds = parse_kinds(args.kinds)
        if args.limit < 0 or args.batch < 1:
            raise ValueError("--limit must be >= 0 and --batch >= 1")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from evals.judge_variants import get_variant, make_judges
    from rubric_jax.rubrics import load_rubric

    t0 = time.perf_counter()
    rubric = load_rubric(args.rubric)
    pairs = select_pairs(build_pairs(load_answers(), seed=args.seed), kinds, args.limit)
    counts = {k: sum(p.kind == k for p in pairs) for k in kinds}
    print(f"loading judge {args.model} (variant {args.variant}); {len(pairs)} pairs {counts}", file=sys.stderr,
          flush=True)
    model, tokenizer = load_judge_model(args.model)
    judges = make_judges(model, tokenizer, args.variant)
    variant = get_variant(args.variant)
    os.makedirs(args.out, exist_ok=True)
    paths = {n: os.path.join(args.out, n) for n in ("judge_fidelity.json", "judge_fidelity.md")}
    written = {}

    def write(study):
        result = {"config": {"model": args.model, "variant": args.variant, "variant_about": variant.about,
                             "needs_engine_hook": variant.needs_hook, "modes": modes, "prompts": prompt_types,
                             "kinds": kinds, "limit": args.limit, "seed": args.seed, "rubric": args.rubric},
                  "counts": counts, "results": study["results"],
                  "judge_stats": [j.metrics() for j, _ in judges],
                  "rows": study["rows"], "seconds": round(time.perf_counter() - t0, 1)}
        write_json(paths["judge_fidelity.json"], result, indent=1)
        written["md"] = render_markdown(result)
        with open(paths["judge_fidelity.md"], "w", encoding="utf-8") as f:
            f.write(written["md"])

    write(run_study(judges, pairs, rubric, modes=modes, prompt_types=prompt_types, batch=args.batch, on_block=write))
    md = written["md"]
    print(md)
    print(f"wrote {paths['judge_fidelity.json']} and {paths['judge_fidelity.md']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
