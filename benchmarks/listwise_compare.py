"""Listwise vs all-pairs vs Swiss judging of whole groups whose ranking is known.

Each group holds one bundled coherent answer (`evals/judge_pairs.py`) and its degraded copies (shuffled,
truncated, repeated sentences and an off-topic answer to another prompt), in a seeded random order. The
frozen embedded judge scores every group on the "overall" criterion three ways, each giving win-rate-like
scores that average 1/2 in a group:

  all        every ordered pair, both orders (G(G-1) judge sequences per group and criterion);
  swiss      Swiss rounds of both-order pairs (the trainer's cheaper pairing);
  listwise   the whole group in one sequence per presentation order (G orders in a Latin square).

Reported per method: accuracy (the fraction of (coherent, degraded) pairs whose coherent answer scores
strictly higher; a tie counts as wrong), the coherent answer's mean score and rank-1 rate, the in-group
spread (std of the group's scores, the signal a GRPO advantage sees), judge sequences per group and seconds
per group (after a warm-up group, so compilation is not counted).

    python benchmarks/listwise_compare.py --out=/tmp/listwise_cmp [--groups=12] [--mode=logit]
        [--methods=all,swiss,listwise] [--model=smollm2-135m-instruct]

Prints the table and writes OUT/listwise_compare.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

METHODS = ("all", "swiss", "listwise")
DEGRADED = ("shuffled", "truncated", "repeated", "off_topic")


def build_groups(n: int, seed: int = 0):
    """[(prompt, responses, index of the coherent answer)] from the bundled answers' degraded-pair set."""
    from evals.judge_pairs import build_pairs, load_answers

    answers = load_answers()[:n]
    pairs = build_pairs(answers, seed=seed, kinds=DEGRADED)
    out = []
    for i, a in enumerate(answers):
        worse = [p.worse for p in pairs if p.better == a.answer and p.prompt == a.prompt]
        responses = [a.answer] + worse
        perm = np.random.default_rng((seed, i)).permutation(len(responses))
        out.append((a.prompt, [responses[j] for j in perm], int(np.flatnonzero(perm == 0)[0])))
    return out


def group_figures(scores: np.ndarray, best: int) -> dict:
    """Figures of one group's scores (G,) whose coherent answer is `best`."""
    s = np.asarray(scores, np.float64)
    others = np.delete(s, best)
    return {"right": int((s[best] > others).sum()), "pairs": int(others.size), "best_score": float(s[best]),
            "rank1": float(s[best] > others.max()), "spread": float(s.std())}


def summarise(per_group: list[dict], seconds: list[float], sequences: float) -> dict:
    right = sum(g["right"] for g in per_group)
    pairs = sum(g["pairs"] for g in per_group)
    return {"groups": len(per_group), "accuracy": right / pairs if pairs else None,
            "best_score": float(np.mean([g["best_score"] for g in per_group])),
            "rank1": float(np.mean([g["rank1"] for g in per_group])),
            "spread": float(np.mean([g["spread"] for g in per_group])),
            "sequences_per_group": sequences, "seconds_per_group": float(np.mean(seconds)) if seconds else None}


def score_group(judge, method: str, prompt: str, responses: list[str], crit, mode: str, seed: int):
    """(scores (G,), judge sequences used) of one group by one method."""
    from rubric_jax.judge.listwise import listwise_batch

    before = judge.stats.judgments
    if method == "listwise":
        r = listwise_batch(judge, [prompt], [responses], [crit], seed=seed, mode=mode)[0]
        scores = np.asarray(r.scores)[:, 0]
    else:
        r = judge.pairwise_batch([prompt], [responses], [crit], mode=mode, pairing=method, seed=seed)[0]
        scores = np.asarray(r.win_rates)[:, 0]
    return scores, judge.stats.judgments - before


def run(judge, groups, methods=METHODS, mode: str = "logit", seed: int = 0, log=print) -> dict:
    from evals.judge_pairs import OVERALL

    out = {}
    for method in methods:
        warm = groups[0]
        score_group(judge, method, warm[0], warm[1], OVERALL, mode, seed)  # compile outside the clock
        judge.cache.clear()  # every group pays for its own verdicts
        figs, secs, seqs = [], [], []
        for k, (prompt, responses, best) in enumerate(groups):
            t0 = time.perf_counter()
            scores, n = score_group(judge, method, prompt, responses, OVERALL, mode, seed + k)
            secs.append(time.perf_counter() - t0)
            seqs.append(n)
            figs.append(group_figures(scores, best))
        out[method] = summarise(figs, secs, float(np.mean(seqs)))
        s = out[method]
        log(f"[{method}] accuracy {s['accuracy']:.3f}, spread {s['spread']:.4f}, "
            f"{s['seconds_per_group']:.2f} s/group")
    return out


def table(result: dict) -> str:
    rows = ["| method | groups | accuracy | coherent mean score | coherent ranked first | in-group spread | "
            "judge sequences / group | s / group |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m, s in result.items():
        rows.append(f"| {m} | {s['groups']} | {s['accuracy']:.3f} | {s['best_score']:.3f} | {s['rank1']:.2f} | "
                    f"{s['spread']:.4f} | {s['sequences_per_group']:.0f} | {s['seconds_per_group']:.2f} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--groups", type=int, default=12)
    ap.add_argument("--mode", default="logit", choices=("logit", "sign", "hard"))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--max_response_tokens", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        ap.error(f"--methods: choose from {METHODS}, got {args.methods!r}")
    if args.groups < 2:
        ap.error("--groups must be >= 2 (the first is also the warm-up)")

    from evals.report import write_json
    from rubric_jax.rewards_api import make_judge

    judge = make_judge(args.model, max_response_tokens=args.max_response_tokens)
    groups = build_groups(args.groups, args.seed)
    result = run(judge, groups, methods, args.mode, args.seed, log=lambda s: print(s, file=sys.stderr, flush=True))
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, "listwise_compare.json"),
               {"config": vars(args), "group_size": len(groups[0][1]), "results": result})
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
