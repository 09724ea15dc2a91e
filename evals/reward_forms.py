"""Which form of a judge's verdicts carries the program's learning signal? Chosen on held-out training prompts.

Why. GRPO learns from the ordering of a group's rewards, not from their level: a rollout's advantage is its
reward standardised within its group (`rubric_jax.rewards.group.advantages`). A judge that passes nearly every
rollout leaves most groups flat however well it ranks them, and a hard verdict (p_pass >= 1/2) throws away the
ranking its probabilities hold. This study measures, before any training run, how well each reward form
built from a judge's per-instruction p_pass stands in for the program's reward on the same rollouts:

    forms       program   r_i = mean_k c_ik                 (c_ik: IFEval's checker, 1 keeps / 0 breaks)
                hard      r_i = mean_k [p_ik >= 1/2]          (rlmr.credit="share", the current judged reward)
                hard@t    r_i = mean_k [p_ik >= t]            (a stricter pass threshold)
                soft      r_i = mean_k p_ik                   (rlmr.credit="soft": the pass probabilities)
                soft-trusted  r_i = mean over trusted k of p_ik, a kind trusted for prompt j when, over the
                          other prompts, the judge orders better than chance (> 1/2) the rollout pairs the
                          program decides on that kind, with >= 8 such pairs (leave-one-prompt-out, so the
                          choice of kinds never sees the prompt it is scored on); 1 when none is trusted.
                          The best a judge-reliability gate chosen on labelled tuning prompts could give.
    alignment   cos(A_form, A_program) over all rollouts, A = GRPO advantages (flat groups contribute 0):
                the cosine between the two policy-gradient weightings; 1 is the program's update, 0 none
    pair acc.   over program-decided pairs in a group (one rollout keeps more instructions than the other):
                the share the form orders the same way, a tie counting 1/2 (chance 0.5)
    signal      the share of groups whose form reward is not flat (GRPO updates on those only)

The prompts are the held-out split of the training prompts (`rubric_jax.data.ifeval_train.split`: whole task
stems held out, the split `configs/learn_ifeval.py` chose its reward on), never the evaluation's 132 prompts.
Rollouts are the base policy's, sampled as the training run samples them (G per prompt, temperature 1.0,
top-k 20, top-p 0.8, at most 160 tokens); intervals are 95% bootstrap over prompts.

    python -m evals.reward_forms --out=DIR [--judge=qwen2.5-coder-1.5b-instruct] [--group_size=8] [--limit=N]

Writes DIR/reward_forms.json (every figure and per-rollout p_pass and program verdicts) and
DIR/reward_forms.md; answers and verdicts are cached in DIR, so a rerun with another --judge samples nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from importlib import resources
from typing import Sequence

import numpy as np

from evals.report import write_json

__all__ = ["FORMS", "alignment", "form_rewards", "main", "pair_accuracy", "signal_rate", "summarise", "trusted_soft"]

log = logging.getLogger("evals.reward_forms")

THRESHOLDS = (0.75, 0.9)
FORMS = ("program", "hard", *(f"hard@{t}" for t in THRESHOLDS), "soft")
TRUSTED = "soft-trusted"
MIN_KIND_PAIRS = 8
POLICY = "smollm2-135m-instruct"


def form_rewards(p_gk: np.ndarray, program_gk: np.ndarray) -> dict[str, np.ndarray]:
    """(G,) reward per form for one group: p_gk the judge's P(keeps instruction k), program_gk the checker's
    0/1; a prompt without instructions gives 1 for every rollout in every form. The training run's own
    functions make them (`rlmr.kept_share` for rlmr.credit="share", `rlmr.kept_probability` for "soft")."""
    from rubric_jax.methods.rlmr import kept_probability, kept_share

    p, c = np.asarray(p_gk, np.float64), np.asarray(program_gk, np.float64)
    if p.shape != c.shape:
        raise ValueError(f"p_pass {p.shape} and program verdicts {c.shape} differ in shape")
    out = {"program": kept_share(c >= 0.5), "hard": kept_share(p >= 0.5),
           "soft": kept_probability(np.full(p.shape, np.nan), p)}
    for t in THRESHOLDS:
        out[f"hard@{t}"] = kept_share(p >= t)
    return {f: np.asarray(out[f], np.float64) for f in FORMS}


def _advantages(r_g: np.ndarray) -> np.ndarray:
    from rubric_jax.rewards.group import advantages

    return np.asarray(advantages(np.asarray(r_g, np.float32)[None], "grpo"))[0].astype(np.float64)


def alignment(form_groups: Sequence[np.ndarray], program_groups: Sequence[np.ndarray]) -> float:
    """cos(A_form, A_program) with both advantage vectors concatenated over groups; 0 when either is all 0."""
    a = np.concatenate([_advantages(r) for r in form_groups])
    b = np.concatenate([_advantages(r) for r in program_groups])
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else 0.0


def _pair_hits(f: np.ndarray, c: np.ndarray) -> tuple[float, int]:
    """(pairs of one group ordered as the program orders them, ties 1/2; program-decided pairs)."""
    hits, n = 0.0, 0
    for i in range(len(c)):
        for j in range(i + 1, len(c)):
            if c[i] == c[j]:
                continue
            n += 1
            s = np.sign(c[i] - c[j]) * np.sign(f[i] - f[j])
            hits += 1.0 if s > 0 else (0.5 if s == 0 else 0.0)
    return hits, n


def pair_accuracy(form_groups: Sequence[np.ndarray], program_groups: Sequence[np.ndarray]) -> tuple[float, int]:
    """(share of program-decided pairs the form orders the same way, ties 1/2; number of such pairs)."""
    counts = [_pair_hits(f, c) for f, c in zip(form_groups, program_groups)]
    hits, n = sum(h for h, _ in counts), sum(k for _, k in counts)
    return (hits / n if n else float("nan")), n


def signal_rate(form_groups: Sequence[np.ndarray]) -> float:
    """Share of groups whose rewards are not all equal."""
    return float(np.mean([np.ptp(r) > 0 for r in form_groups])) if len(form_groups) else float("nan")


def kind_pair_counts(groups: Sequence[tuple[np.ndarray, np.ndarray]],
                     kinds: Sequence[Sequence[str]]) -> list[dict[str, np.ndarray]]:
    """Per prompt, per instruction kind: [pairs ordered as the program orders them (ties 1/2), decided pairs],
    over the rollout pairs of the prompt's group that the program decides on an instruction of that kind."""
    out = []
    for (p, c), ks in zip(groups, kinds):
        counts: dict[str, np.ndarray] = {}
        for k, kind in enumerate(ks):
            counts[kind] = counts.get(kind, np.zeros(2)) + np.asarray(_pair_hits(p[:, k], c[:, k]))
        out.append(counts)
    return out


def trusted_soft(groups: Sequence[tuple[np.ndarray, np.ndarray]], kinds: Sequence[Sequence[str]],
                 min_pairs: int = MIN_KIND_PAIRS) -> list[np.ndarray]:
    """(G,) rewards per prompt of the soft-trusted form (module docstring): for prompt j, r_i = mean of p_ik over
    its instructions whose kind the judge orders better than chance on the other prompts (hits / pairs > 1/2,
    pairs >= min_pairs); every rollout 1 when none qualifies."""
    counts = kind_pair_counts(groups, kinds)
    total: dict[str, np.ndarray] = {}
    for cnt in counts:
        for kind, hn in cnt.items():
            total[kind] = total.get(kind, np.zeros(2)) + hn
    out = []
    for (p, _), ks, own in zip(groups, kinds, counts):
        rest = {kind: total[kind] - own.get(kind, 0.0) for kind in set(ks)}
        keep = [k for k, kind in enumerate(ks) if rest[kind][1] >= min_pairs and rest[kind][0] > rest[kind][1] / 2]
        out.append(np.asarray(p, np.float64)[:, keep].mean(1) if keep else np.ones(len(p)))
    return out


def summarise(groups: Sequence[tuple[np.ndarray, np.ndarray]], *, kinds: Sequence[Sequence[str]] | None = None,
              resamples: int = 2000, seed: int = 0) -> dict:
    """Per form: alignment and pair accuracy with 95% bootstrap intervals over groups, signal rate, mean reward.
    groups: (p_gk, program_gk) per prompt; kinds: each prompt's instruction kinds, which add the soft-trusted
    form. Each group's advantage dot products and pair counts are computed once; a bootstrap draw sums them
    over its groups (the same figures `alignment` / `pair_accuracy` give). The trusted kinds are chosen once,
    leave-one-prompt-out, not again within each bootstrap draw."""
    if not groups:
        raise ValueError("no groups to summarise")
    rewards = [form_rewards(p, c) for p, c in groups]
    forms = FORMS
    if kinds is not None:
        for r, t in zip(rewards, trusted_soft(groups, kinds)):
            r[TRUSTED] = t
        forms = (*FORMS, TRUSTED)
    prog = [r["program"] for r in rewards]
    a_prog = [_advantages(r) for r in prog]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(groups), (resamples, len(groups)))
    out = {}
    for f in forms:
        rf = [r[f] for r in rewards]
        a_f = [_advantages(r) for r in rf]
        ab = np.array([a @ b for a, b in zip(a_f, a_prog)])
        aa = np.array([a @ a for a in a_f])
        bb = np.array([b @ b for b in a_prog])
        hits, pairs = (np.array(x, np.float64) for x in zip(*[_pair_hits(x, c) for x, c in zip(rf, prog)]))
        with np.errstate(invalid="ignore", divide="ignore"):
            den = np.sqrt(aa[draws].sum(1) * bb[draws].sum(1))
            boot_a = np.where(den > 0, ab[draws].sum(1) / np.where(den > 0, den, 1.0), 0.0)
            boot_p = hits[draws].sum(1) / pairs[draws].sum(1)
        den = float(np.sqrt(aa.sum() * bb.sum()))
        out[f] = {"alignment": float(ab.sum() / den) if den > 0 else 0.0, "alignment_ci": _ci(boot_a),
                  "pair_accuracy": float(hits.sum() / pairs.sum()) if pairs.sum() else float("nan"),
                  "pair_accuracy_ci": _ci(boot_p), "decided_pairs": int(pairs.sum()), "signal": signal_rate(rf),
                  "mean_reward": float(np.mean(np.concatenate(rf)))}
    return out


def _ci(xs) -> list[float]:
    xs = np.asarray([x for x in xs if np.isfinite(x)])
    return [float(np.percentile(xs, 2.5)), float(np.percentile(xs, 97.5))] if xs.size else [float("nan")] * 2


def render_markdown(result: dict) -> str:
    lines = [f"# Reward forms of the judge {result['judge']} against IFEval's programs", "",
             f"{result['prompts']} held-out training prompts x G = {result['group_size']} rollouts of "
             f"{result['policy']}; 95% bootstrap intervals over prompts.", "",
             "| form | alignment cos(A, A_program) | pair accuracy | decided pairs | groups with signal | mean reward |",
             "|---|---|---|---:|---:|---:|"]
    for f, s in result["forms"].items():
        lines.append(f"| {f} | {s['alignment']:+.3f} [{s['alignment_ci'][0]:+.3f}, {s['alignment_ci'][1]:+.3f}] | "
                     f"{s['pair_accuracy']:.3f} [{s['pair_accuracy_ci'][0]:.3f}, {s['pair_accuracy_ci'][1]:.3f}] | "
                     f"{s['decided_pairs']} | {s['signal']:.2f} | {s['mean_reward']:.3f} |")
    if "pairwise_reading" in result:
        pr = result["pairwise_reading"]
        lines += ["", f"Pairwise against pointwise on the same {pr['comparisons']} program-decided (pair, instruction)"
                  f" comparisons of the first {pr['prompts']} prompts ({result['seconds_pairwise']:.0f} s of pairwise"
                  " judging):", "",
                  "| reading | pair accuracy |", "|---|---|"]
        lines += [f"| {name} | {pr[name]['pair_accuracy']:.3f} [{pr[name]['pair_accuracy_ci'][0]:.3f}, "
                  f"{pr[name]['pair_accuracy_ci'][1]:.3f}] |" for name in ("pairwise", "pointwise")]
    lines += ["", f"Sampling {result['seconds_sampling']:.0f} s, judging {result['seconds_judging']:.0f} s.", ""]
    return "\n".join(lines)


def decided_pairs(program_gk: np.ndarray) -> list[tuple[int, int]]:
    """Rollout pairs (i < j) of one group that the program decides on at least one instruction."""
    c = np.asarray(program_gk)
    return [(i, j) for i in range(len(c)) for j in range(i + 1, len(c)) if np.any(c[i] != c[j])]


def pairwise_reading(p_pass: Sequence[np.ndarray], program: Sequence[np.ndarray], pair_p: Sequence[dict],
                     *, resamples: int = 2000, seed: int = 0) -> dict:
    """The judge's pairwise reading against its pointwise one on the same comparisons: over every (pair i < j,
    instruction k) the program decides (c_ik != c_jk), the share the pairwise verdict P(i beats j on k) orders as
    the program does (> 1/2 for i when c_ik > c_jk; exactly 1/2 counts 1/2), and the same share for the pointwise
    p_ik vs p_jk. pair_p: per prompt {(i, j): (C,) P(i beats j)}. 95% bootstrap intervals over prompts."""
    hits = np.zeros((len(program), 2))
    counts = np.zeros(len(program))
    for q, (p, c, pp) in enumerate(zip(p_pass, program, pair_p)):
        for (i, j), pij in pp.items():
            for k in np.flatnonzero(c[i] != c[j]):
                want = np.sign(c[i, k] - c[j, k])
                for col, got in enumerate((np.sign(pij[k] - 0.5), np.sign(p[i, k] - p[j, k]))):
                    hits[q, col] += 1.0 if want * got > 0 else (0.5 if got == 0 else 0.0)
                counts[q] += 1
    draws = np.random.default_rng(seed).integers(0, len(program), (resamples, len(program)))
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = hits[draws].sum(1) / counts[draws].sum(1)[:, None]
    n = counts.sum()
    return {"comparisons": int(n),
            **{name: {"pair_accuracy": float(hits[:, col].sum() / n) if n else float("nan"),
                      "pair_accuracy_ci": _ci(boot[:, col])} for col, name in enumerate(("pairwise", "pointwise"))}}


def _judge_pairs(judge_name: str, records, answers, program, cache: str) -> list[dict]:
    """P(i beats j) per instruction for every program-decided pair, asked as learn_ifeval_pairwise asks it (its
    judge section: the "worse" question in both presentation orders), one pair a group; cached in `cache`."""
    from rubric_jax.rubrics.types import Rubric

    out: list[dict] = [{} for _ in records]
    if os.path.exists(cache):  # a cut-short run's pairs are kept: judge only what is missing
        with open(cache, encoding="utf-8") as f:
            got = json.load(f)
        if [g["id"] for g in got] != [r["id"] for r in records[:len(got)]]:
            raise ValueError(f"{cache} holds pairs of other records; remove it or use another --out")
        for q, g in enumerate(got):
            out[q] = {(i, j): np.asarray(v, np.float64) for i, j, v in g["pairs"]}
    items = [(q, i, j) for q, c in enumerate(program) for i, j in decided_pairs(c) if (i, j) not in out[q]]
    if not items:
        return out
    judge = build_judge(judge_name, "pairwise")
    rubrics = [Rubric.from_dict(r["rubric"]) for r in records]
    for r, rub in zip(records, rubrics):
        if [x.id for x in rub.criteria] != [x["type"] for x in r["constraints"]]:
            raise ValueError(f"record {r['id']!r}: its rubric's criteria are not its constraints in order")
    t0 = time.perf_counter()
    for b in range(0, len(items), 8):
        batch = items[b:b + 8]
        res = judge.pairwise_batch([records[q]["prompt"] for q, _, _ in batch],
                                   [[answers[q][i], answers[q][j]] for q, i, j in batch],
                                   [rubrics[q] for q, _, _ in batch])
        for (q, i, j), r in zip(batch, res):
            out[q][(i, j)] = np.asarray(r.p[0, 1], np.float64)
        write_json(cache, [{"id": r["id"], "pairs": [[i, j, v.tolist()] for (i, j), v in g.items()]}
                           for r, g in zip(records, out)])
        log.info("judged %d/%d pairs (%.0f s)", b + len(batch), len(items), time.perf_counter() - t0)
    return out


def heldout_records(limit: int = 0) -> list[dict]:
    from rubric_jax.data.ifeval_train import split

    path = resources.files("rubric_jax.data") / "ifeval_train.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    held = split(records)[1]
    return held[:limit] if limit else held


def _sample(records, group_size: int, cache: str) -> list[list[str]]:
    """G answers per record from the base policy, as the training run samples them; cached in `cache`."""
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            got = json.load(f)
        if [g["id"] for g in got] == [r["id"] for r in records] and all(len(g["answers"]) == group_size for g in got):
            return [g["answers"] for g in got]
    import jax.numpy as jnp

    from rubric_jax.models.loading import load_model
    from rubric_jax.models.tokenizer import load_tokenizer
    from rubric_jax.sampling.api import generate

    model, tok = load_model(POLICY, dtype=jnp.float32), load_tokenizer(POLICY)
    out = []
    for i in range(0, len(records), 2):  # 2 prompts x G a batch, as a training step samples
        batch = records[i:i + 2]
        texts = generate(model, tok, [r["prompt"] for r in batch], max_new_tokens=160, temperature=1.0, top_k=20,
                         top_p=0.8, seed=i, num_samples=group_size)
        out += [[t.strip() for t in texts[b * group_size:(b + 1) * group_size]] for b in range(len(batch))]
        log.info("sampled %d/%d prompts", len(out), len(records))
    write_json(cache, [{"id": r["id"], "answers": a} for r, a in zip(records, out)])
    return out


def build_judge(judge_name: str, source: str = "judged"):
    """The judge exactly as the source's config (evals.reward_sources.SOURCES: learn_ifeval_judged.py by
    default) builds it for training (its judge section: mode, questions, truncation, float32), with
    `judge_name`'s weights."""
    import jax.numpy as jnp

    from evals.reward_sources import source_config
    from rubric_jax.judge import Judge
    from rubric_jax.models.loading import load_model
    from rubric_jax.models.tokenizer import load_tokenizer
    from rubric_jax.rl import preflight

    config = source_config(source)
    section = preflight.check(config)["judge"]
    return Judge(load_model(judge_name, dtype=jnp.float32), load_tokenizer(judge_name), section,
                 max_response_tokens=config.judge.max_response_tokens)


def run(out_dir: str, judge_name: str, group_size: int, limit: int, pairwise: int = 0) -> dict:
    """pairwise: ask the program-decided pairs of the first `pairwise` prompts pairwise too (0: none)."""
    from rubric_jax.verifiers.constraints import check_program, parse_constraints
    from rubric_jax.verifiers.verifier import ConstraintVerifier

    records = heldout_records(limit)
    t0 = time.perf_counter()
    answers = _sample(records, group_size, os.path.join(out_dir, f"answers_g{group_size}.json"))
    t1 = time.perf_counter()
    verdict_cache = os.path.join(out_dir, f"verdicts_{judge_name.replace('/', '_')}_g{group_size}.json")
    constraints = [parse_constraints(r["constraints"], where=f"record {r['id']!r}") for r in records]
    program = [np.asarray([[float(check_program(c, a)) for c in cs] for a in ans]).reshape(len(ans), len(cs))
               for cs, ans in zip(constraints, answers)]
    cached = None
    if os.path.exists(verdict_cache):
        with open(verdict_cache, encoding="utf-8") as f:
            cached = json.load(f)
        # verdicts are only reused for the very records they were made for (--limit changes the records)
        if len(cached) != len(records) or any(np.shape(x) != (len(a), len(cs))
                                              for x, a, cs in zip(cached, answers, constraints)):
            log.warning("%s holds verdicts for other records: judging again", verdict_cache)
            cached = None
    if cached is not None:
        p_pass = [np.asarray(x, np.float64) for x in cached]
    else:
        log.info("loading judge %s ...", judge_name)
        verifier = ConstraintVerifier(build_judge(judge_name), "llm")
        p_pass = []
        for i in range(0, len(records), 2):
            vs = verifier.verify([r["prompt"] for r in records[i:i + 2]], answers[i:i + 2], constraints[i:i + 2])
            p_pass += [v.llm.astype(np.float64) for v in vs]
            log.info("judged %d/%d prompts (%.0f s)", len(p_pass), len(records), time.perf_counter() - t1)
        write_json(verdict_cache, [p.tolist() for p in p_pass])
    t2 = time.perf_counter()
    # a rerun reads both caches: the seconds reported are those of the run that sampled and judged
    timings_path = os.path.join(out_dir, "timings.json")
    timings = json.load(open(timings_path, encoding="utf-8")) if os.path.exists(timings_path) else {}
    if t1 - t0 > 1.0:
        timings["sampling"] = t1 - t0
    if t2 - t1 > 1.0:
        timings[judge_name] = t2 - t1
    write_json(timings_path, timings)
    kinds = [[c.kind for c in cs] for cs in constraints]
    reading = {}
    if pairwise:
        t3 = time.perf_counter()
        n = min(pairwise, len(records))
        pair_p = _judge_pairs(judge_name, records[:n], answers[:n], program[:n],
                              os.path.join(out_dir, f"pairs_{judge_name.replace('/', '_')}_g{group_size}.json"))
        if time.perf_counter() - t3 > 1.0:  # as above: a rerun from the cache keeps the judging run's seconds
            timings[f"{judge_name}/pairwise"] = time.perf_counter() - t3
            write_json(timings_path, timings)
        reading = {"pairwise_reading": {"prompts": n, **pairwise_reading(p_pass[:n], program[:n], pair_p)},
                   "seconds_pairwise": timings.get(f"{judge_name}/pairwise", 0.0)}
    return {**reading,"judge": judge_name, "policy": POLICY, "group_size": group_size, "prompts": len(records),
            "forms": summarise(list(zip(p_pass, program)), kinds=kinds),
            "seconds_sampling": timings.get("sampling", t1 - t0),
            "seconds_judging": timings.get(judge_name, t2 - t1),
            "rollouts": [{"id": r["id"], "kinds": k, "p_pass": p.tolist(), "program": c.tolist()}
                         for r, k, p, c in zip(records, kinds, p_pass, program)]}


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ap = argparse.ArgumentParser(prog="python -m evals.reward_forms", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (answers and verdicts are cached there)")
    ap.add_argument("--judge", default="qwen2.5-coder-1.5b-instruct", help="judge: embedded name or checkpoint")
    ap.add_argument("--group_size", type=int, default=8, help="rollouts per prompt (the training run's G)")
    ap.add_argument("--limit", type=int, default=0, help="first N held-out prompts (0 = all)")
    ap.add_argument("--pairwise", type=int, default=0, metavar="N",
                    help="also ask the program-decided pairs of the first N prompts pairwise, as "
                         "learn_ifeval_pairwise's judge does (about 8 s a pair and instruction, both orders, on 2 "
                         "cores; 0 = none)")
    args = ap.parse_args(argv)
    if args.group_size < 2 or args.limit < 0 or args.pairwise < 0:
        print("error: --group_size must be >= 2, --limit and --pairwise >= 0", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.makedirs(args.out, exist_ok=True)
    result = run(args.out, args.judge, args.group_size, args.limit, args.pairwise)
    md = render_markdown(result)
    write_json(os.path.join(args.out, "reward_forms.json"), result)
    with open(os.path.join(args.out, "reward_forms.md"), "w", encoding="utf-8") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
