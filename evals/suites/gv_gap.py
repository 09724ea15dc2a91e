"""gv_gap: the generation-verification gap of a policy under a judge (RcRL paper, section 3 and appendix A.1).

"Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable Domains" argues that a
model can tell good writing from bad more reliably than it can write well, and that best-of-n selection with
the model as its own judge is how that asymmetry turns into a training signal. This suite measures both
sides for the first --models entry (the policy) and the --judge, per prompt q = 1..Q:

  samples     n answers s_1..s_n (--samples; sample k uses seed --seed + k, so answers are cached and shared
              with other suites that sample with those seeds).
  preference  both orders cancel position bias: with F[i, j] = P(i wins | i shown first, j second),
                  P[i, j] = (F[i, j] + 1 - F[j, i]) / 2,      P[i, i] = 1/2.
              P_J under the judge, P_R under the reference (--reference_judge; the judge itself when absent).

VERIFICATION (pairs whose better side is known; a pair is right when P_J[better, worse] > 1/2, a tie is wrong):
  (a) known    each sample s_k against its own degraded copy d_k (kind cycles shuffled, truncated, repeated
               with k: sentences reordered, the first 35% of words, a two-sentence block repeated; the pure
               functions of evals.judge_pairs, with a word shuffle when a sample has a single sentence).
  (b) ranked   pairs (i, j) of samples on which the reference is confident, |P_R[i, j] - 1/2| > --margin,
               the better side being the one the reference prefers.
  accuracy     pooled over prompts, A = sum_q c_q / sum_q m_q (c_q right of m_q pairs); chance is 1/2.

GENERATION (what best-of-n selection with the judge buys, measured by the reference):
  pick         b_q = argmax_i  w_i,   w_i = (1 / (n - 1)) sum_{j != i} P_J[i, j]   (all-pairs win rate; ties
               go to the lower index),
  gain         g_q = (1 / n) sum_j P_R[b_q, j]   (the pick against a uniformly random sample of the same n,
               the pick itself included, which contributes 1/2); G = (1 / Q) sum_q g_q; no gain is 1/2.

GAP: the paper's claim is that verifying beats generating, i.e. the judge's margin over chance when it ranks
pairs exceeds the margin best-of-n selection gains over a random sample. With V the verification accuracy
that uses the same notion of quality as G (the ranked pairs (b) under a distinct reference; the known pairs
(a) when the judge is its own reference, because (b) is then 1 by construction),

    gap = (V - 1/2) - (G - 1/2) = V - G.

gap > 0: verification outruns generation (the asymmetry exists and selection has room to exploit it).

Self-referential (no --reference_judge): P_R = P_J, so every ranked pair is right (V_ranked = 1) and G >= 1/2
by construction (the row means of P average 1/2, and the pick has the largest); G then measures how sure the
judge is of its own pick, not a gain in quality. The report says so.

Intervals: percentile bootstrap over prompts (--bootstrap resamples, level 95%): each replicate draws Q prompts
with replacement and recomputes the statistic with every pair and sample of a drawn prompt counted as often
as it was drawn; V and G of one replicate share its draw, so the gap's interval accounts for their
correlation. Replicates with no pairs (a ratio 0/0) are dropped.

Writes answers.jsonl, results.json, report.md and gv_gap.png into --out.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Sequence

import numpy as np

DEGRADATIONS = ("shuffled", "truncated", "repeated")
LEVEL = 0.95


# ---------------------------------------------------------------------------------------------
# Statistics (pure numpy)


def preference_matrix(first: np.ndarray) -> np.ndarray:
    """F (n, n) with F[i, j] = P(i wins | i first) -> P with P[i, j] = (F[i, j] + 1 - F[j, i]) / 2, diag 1/2.
    P + P.T = 1 exactly, so each unordered pair carries one both-orders preference."""
    f = np.asarray(first, np.float64)
    p = (f + 1.0 - f.T) / 2.0
    np.fill_diagonal(p, 0.5)
    return p


def pair_correct(p_better: Sequence[float]) -> np.ndarray:
    """A pair is right when the both-orders probability of its better side exceeds 1/2 (a tie is wrong)."""
    return np.asarray(p_better, np.float64) > 0.5


def accuracy(correct: Sequence[float], total: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Pooled accuracy sum_q w_q c_q / sum_q w_q m_q over prompts (c_q right of m_q pairs); NaN without pairs."""
    c, m = np.asarray(correct, np.float64), np.asarray(total, np.float64)
    w = np.ones_like(c) if weights is None else np.asarray(weights, np.float64)
    den = float(np.sum(w * m))
    return float(np.sum(w * c)) / den if den > 0 else math.nan


def best_of_n(p_judge: np.ndarray) -> int:
    """The index with the highest all-pairs win rate w_i = mean_{j != i} P[i, j] (first index on ties)."""
    p = np.asarray(p_judge, np.float64)
    n = p.shape[0]
    if n < 2:
        return 0
    wins = (p.sum(axis=1) - np.diag(p)) / (n - 1)
    return int(np.argmax(wins))


def generation_gain(p_ref: np.ndarray, pick: int) -> float:
    """Expected reference preference of sample `pick` over a uniformly random sample of the same n (itself
    included, at 1/2): (1 / n) sum_j P_R[pick, j]. 1/2 = selection gains nothing."""
    p = np.asarray(p_ref, np.float64)
    return float(np.mean(p[pick]))


def confident_pairs(p_ref: np.ndarray, margin: float) -> list[tuple[int, int]]:
    """(better, worse) for each unordered pair i < j with |P_R[i, j] - 1/2| > margin."""
    p = np.asarray(p_ref, np.float64)
    out = []
    for i in range(p.shape[0]):
        for j in range(i + 1, p.shape[0]):
            if abs(p[i, j] - 0.5) > margin:
                out.append((i, j) if p[i, j] > 0.5 else (j, i))
    return out


def mean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    v = np.asarray(values, np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, np.float64)
    return float(np.sum(w * v) / np.sum(w)) if np.sum(w) > 0 else math.nan


def gv_gap(correct: Sequence[float], total: Sequence[float], gains: Sequence[float],
           weights: Sequence[float] | None = None) -> float:
    """(V - 1/2) - (G - 1/2) = V - G, V = accuracy(correct, total), G = mean gain over prompts."""
    return accuracy(correct, total, weights) - mean(gains, weights)


def bootstrap_interval(stat: Callable[[np.ndarray], float], n_prompts: int, *, reps: int = 1000, seed: int = 0,
                       level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of stat(weights) over `reps` prompt resamples; weights[q] = times prompt q was
    drawn (Q draws with replacement). Non-finite replicates are dropped; (nan, nan) when none is left."""
    if reps <= 0 or n_prompts <= 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    vals = np.array([stat(np.bincount(rng.integers(0, n_prompts, n_prompts), minlength=n_prompts)
                          .astype(np.float64)) for _ in range(int(reps))])
    vals = vals[np.isfinite(vals)]
    if not vals.size:
        return math.nan, math.nan
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(vals, [q, 1.0 - q])
    return float(lo), float(hi)


def summarize(known: dict, ranked: dict, gains: Sequence[float], *, self_referential: bool, reps: int,
              seed: int) -> dict:
    """Per-prompt arrays {correct, total} for (a) known and (b) ranked pairs and the gains -> estimates with
    intervals: verification_known, verification_ranked, generation, gap (see the module docstring)."""
    g = np.asarray(gains, np.float64)
    nq = len(g)
    v_src = known if self_referential else ranked

    def block(fn):
        return {"estimate": fn(None), **dict(zip(("lo", "hi"), bootstrap_interval(fn, nq, reps=reps, seed=seed)))}

    return {
        "verification_known": {**block(lambda w: accuracy(known["correct"], known["total"], w)),
                               "pairs": int(np.sum(known["total"]))},
        "verification_ranked": {**block(lambda w: accuracy(ranked["correct"], ranked["total"], w)),
                                "pairs": int(np.sum(ranked["total"]))},
        "generation": block(lambda w: mean(g, w)),
        "gap": {**block(lambda w: gv_gap(v_src["correct"], v_src["total"], g, w)),
                "verification": "known" if self_referential else "ranked"},
    }


# ---------------------------------------------------------------------------------------------
# Degradations


def degrade(text: str, kind: str, seed) -> str:
    """A worse copy of `text`: the pure degradations of evals.judge_pairs; a one-sentence text cannot be
    reordered or have a block repeated, so it gets its words shuffled (still incoherent) instead."""
    from evals.generate import shuffle_words
    from evals.judge_pairs import repeat_block, sentences, shuffle_sentences, truncate

    if kind == "truncated":
        out = truncate(text)
    elif len(sentences(text)) < 2:
        out = shuffle_words(text, seed) if kind == "shuffled" else text + " " + text
    elif kind == "shuffled":
        out = shuffle_sentences(text, seed)
    elif kind == "repeated":
        out = repeat_block(text, seed)
    else:
        raise ValueError(f"unknown degradation {kind!r}; expected one of {DEGRADATIONS}")
    return out


# ---------------------------------------------------------------------------------------------
# IO


def add_args(group) -> None:
    group.add_argument("--samples", type=int, default=8, help="answers per prompt from the policy (n)")
    group.add_argument("--reference_judge", default="",
                       help="judge that defines quality for ranked pairs and generation (default: --judge)")
    group.add_argument("--margin", type=float, default=0.1,
                       help="ranked pairs: the reference must prefer one side by more than this over 1/2")


def _fmt(b: dict) -> str:
    def f(x):
        return "n/a" if x is None or not math.isfinite(x) else f"{x:.3f}"
    return f"{f(b['estimate'])} [{f(b['lo'])}, {f(b['hi'])}]"


def by_kind(records: Sequence[dict]) -> dict:
    """{kind: {right, pairs, accuracy}} over known-pair records {"kind", "right"} (no interval: few pairs)."""
    out = {}
    for kind in DEGRADATIONS:
        rs = [bool(r["right"]) for r in records if r["kind"] == kind]
        out[kind] = {"right": sum(rs), "pairs": len(rs), "accuracy": sum(rs) / len(rs) if rs else math.nan}
    return out


def format_table(stats: dict) -> str:
    rows = [("verification, known pairs (a)", stats["verification_known"], stats["verification_known"]["pairs"]),
            ("verification, ranked pairs (b)", stats["verification_ranked"], stats["verification_ranked"]["pairs"]),
            ("generation (best-of-n vs random)", stats["generation"], ""),
            (f"gap (V_{stats['gap']['verification']} - G)", stats["gap"], "")]
    out = ["| quantity | estimate [95% CI] | pairs |", "|---|---|---|"]
    out += [f"| {name} | {_fmt(b)} | {n} |" for name, b, n in rows]
    kinds = stats.get("verification_known_by_kind") or {}
    if kinds:
        out += ["", "| known pairs by degradation | right / pairs |", "|---|---|"]
        out += [f"| {k} | {v['right']} / {v['pairs']} |" for k, v in kinds.items()]
    return "\n".join(out)


def _plot(stats: dict, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    keys = [("verification_known", "verify (a)"), ("verification_ranked", "verify (b)"),
            ("generation", "generate")]
    x = np.arange(len(keys))
    est = np.array([np.nan if stats[k]["estimate"] is None else stats[k]["estimate"] for k, _ in keys], float)
    lo = np.array([np.nan if stats[k]["lo"] is None else stats[k]["lo"] for k, _ in keys], float)
    hi = np.array([np.nan if stats[k]["hi"] is None else stats[k]["hi"] for k, _ in keys], float)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    ok = np.isfinite(est)
    err = np.vstack([np.where(np.isfinite(lo), est - lo, 0), np.where(np.isfinite(hi), hi - est, 0)])
    colors = np.array(["tab:blue", "tab:cyan", "tab:orange"])
    ax.bar(x[ok], est[ok], color=list(colors[ok]), yerr=np.maximum(err[:, ok], 0), capsize=5)
    ax.axhline(0.5, color="grey", ls="--", lw=0.8, label="chance / no gain")
    ax.set_xticks(x)
    ax.set_xticklabels([n for _, n in keys])
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy / win rate")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(args, tools=None) -> dict:
    from evals.judges import OVERALL
    from evals.report import strict_json
    from evals.suites.pairwise_elo import DEFAULT_PROMPTS, load_prompts
    from evals.tools import SuiteTools

    tools = tools or SuiteTools(args)
    n = int(args.samples)
    if n < 2:
        raise ValueError("--samples: gv_gap needs at least 2 answers per prompt")
    if not 0.0 <= args.margin < 0.5:
        raise ValueError("--margin: must be in [0, 0.5)")
    if not args.judge:
        raise ValueError("--judge: give a judge model (path, embedded name or openai:MODEL@BASE_URL)")
    policy = tools.contestants()[0]
    if len(policy.members) != 1 or policy.members[0].shuffled:
        raise ValueError("--models: gv_gap's policy (the first entry) must be one plain model")
    data = args.data or DEFAULT_PROMPTS
    recs = load_prompts(data, args.prompts)
    prompts = [r["prompt"] for r in recs]
    member = tools.load([policy])[policy.name][0]
    # samples[k][q]: seed + k gives sample k of every prompt (one cached generate call per k)
    samples = [tools.generate(member, prompts, seed=args.seed + k, desc=f"{policy.name} s{k}") for k in range(n)]

    ref_spec = (args.reference_judge or args.judge).strip()
    self_ref = ref_spec == args.judge.strip()
    judge, ref = tools.judge(args.judge), tools.judge(ref_spec)
    crit = [OVERALL]
    all_pairs = [(i, j) for i in range(n) for j in range(n) if i != j]

    def pref(j, prompt, texts):
        f = np.full((n, n), 0.5)
        for (i, k), v in zip(all_pairs, j.p_first(prompt, texts, all_pairs, crit)[:, 0]):
            f[i, k] = v
        return preference_matrix(f)

    known = {"correct": np.zeros(len(prompts)), "total": np.zeros(len(prompts))}
    ranked = {"correct": np.zeros(len(prompts)), "total": np.zeros(len(prompts))}
    gains, per_prompt = np.zeros(len(prompts)), []
    for q, prompt in enumerate(prompts):
        texts = [samples[k][q] for k in range(n)]
        pj = pref(judge, prompt, texts)
        pr = pj if self_ref else pref(ref, prompt, texts)
        # (a) each sample vs its degraded copy; an empty or unchanged sample has no known-worse copy
        kinds = []
        for k, t in enumerate(texts):
            kind = DEGRADATIONS[k % len(DEGRADATIONS)]
            d = degrade(t, kind, (args.seed, q, k)) if t.strip() else t
            if d == t:
                continue
            f = judge.p_first(prompt, [t, d], [(0, 1), (1, 0)], crit)[:, 0]
            right = bool(pair_correct([(f[0] + 1.0 - f[1]) / 2.0])[0])
            known["correct"][q] += right
            known["total"][q] += 1
            kinds.append({"sample": k, "kind": kind, "right": right})
        # (b) pairs the reference is confident about
        conf = confident_pairs(pr, args.margin)
        ranked["total"][q] = len(conf)
        ranked["correct"][q] = int(pair_correct([pj[b, w] for b, w in conf]).sum()) if conf else 0
        pick = best_of_n(pj)
        gains[q] = generation_gain(pr, pick)
        per_prompt.append({"id": recs[q].get("id", q), "pick": pick, "gain": gains[q], "known": kinds,
                           "ranked_pairs": len(conf), "ranked_right": int(ranked["correct"][q])})
        tools.log(f"gv_gap: prompt {q + 1}/{len(prompts)}: known {int(known['correct'][q])}/"
                  f"{int(known['total'][q])}, ranked {int(ranked['correct'][q])}/{len(conf)}, "
                  f"pick {pick}, gain {gains[q]:.3f}")

    tools.out.jsonl("answers.jsonl", ({"id": r.get("id", q), "prompt": r["prompt"],
                                       "answers": [s[q] for s in samples], "pick": per_prompt[q]["pick"]}
                                      for q, r in enumerate(recs)))
    stats = summarize(known, ranked, gains, self_referential=self_ref, reps=args.bootstrap, seed=args.seed)
    stats["verification_known_by_kind"] = by_kind([k for p in per_prompt for k in p["known"]])
    result = {
        "suite": "gv_gap", "policy": policy.name, "judge": args.judge, "reference_judge": ref_spec,
        "judge_questions": getattr(args, "judge_questions", "better"),
        "self_referential": self_ref, "samples": n, "margin": args.margin, "prompts": len(prompts),
        "data": os.path.abspath(data), "seed": args.seed, "generation_settings": tools.settings.key(),
        "level": LEVEL, "bootstrap": args.bootstrap, **stats, "per_prompt": per_prompt,
        "fingerprints": {"policy": member.fingerprint, "judge": judge.fingerprint, "reference": ref.fingerprint},
    }
    title = args.title or f"gv_gap: {policy.name} judged by {args.judge} ({len(prompts)} prompts x {n} samples)"
    result["title"] = title
    tools.out.json("results.json", result)
    stats = strict_json(stats)
    _plot(stats, tools.out.path("gv_gap.png"), title)
    table = format_table(stats)
    note = ("**Self-referential**: no --reference_judge, so the judge is its own reference: ranked-pair "
            "accuracy (b) is 1 by construction and the gap uses the known pairs (a); generation is the judge "
            "grading its own pick (>= 0.5 by construction), not an independent measure of quality." if self_ref else
            f"Reference judge: `{ref_spec}` (ranked pairs with |P_R - 1/2| > {args.margin}).")
    tools.out.text("report.md", f"# {title}\n\n{note}\n\nVerification: share of pairs whose known better side the "
                   f"judge prefers (chance 0.5). Generation: reference win rate of the judge's best-of-{n} pick over "
                   f"a random sample of the same {n} (no gain 0.5). Gap = (V - 0.5) - (G - 0.5). Intervals: "
                   f"{int(100 * LEVEL)}% bootstrap over prompts ({args.bootstrap} resamples).\n\n{table}\n\n"
                   f"![gv_gap](gv_gap.png)\n")
    print(table, flush=True)  # the result on stdout, as pairwise_elo does; --quiet silences progress only
    return result
