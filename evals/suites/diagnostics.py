"""diagnostics: text pathologies of each contestant's answers, under the trainer's metric names.

The RcRL paper ("Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable Domains",
section 5.3 and appendix A.4, Table 5) links judge hacking to entropy collapse, repeated n-grams and tokens of
a foreign writing system. The trainer logs those figures per step (rubric_jax.rl.diagnostics); this suite
computes the same names on evaluation answers, so a training curve and an eval table read side by side.

For each contestant and each member, --samples answers per prompt (sample k with seed --seed + k, cached and
shared with the other suites), then `text_diagnostics(texts, prompts, tokenizer)`:

  diversity/distinct_<n>    distinct-n within each prompt's samples, averaged over prompts (n = 1, 2, 3):
                            |distinct n-grams| / |n-gram occurrences|; with one sample per prompt, each text
                            alone
  repetition/ngram_3        mean over texts of rep_3 = 1 - |set of its 3-grams| / |its 3-grams|
  repetition/overused_3     % of all 3-gram occurrences taken by the top over-used 3-grams across prompts
  completion_words/mean, /median, completion_len/mean, /median (tokens), foreign_script_rate (tokens),
  foreign_script_word_rate, empty_completions

plus policy_entropy, the mean per-token entropy of the sampled tokens' distributions (temperature-scaled,
before top-k/top-p filtering, as the sampler records it and the trainer logs it), token-weighted:

    policy_entropy = sum_answers sum_t H_t / sum_answers T,    H_t = -sum_v pi_t(v) log pi_t(v),

T the generated tokens of an answer (its end-of-sequence token included). evals.generate keeps only texts, so
the suite wraps the sampler while generating to record each row's entropy, and caches it next to the answer
(kind "entropy"); an answer cached earlier without its entropy is sampled once more (the same key gives the
same tokens). A shuffled: contestant's words were never sampled in that order: its entropy is n/a.

Writes answers.jsonl, results.json, report.md (a Markdown table) and diagnostics.png (one bar chart per
metric) into --out.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile

import numpy as np

# Columns of the table and the chart, in order (the trainer's names; policy_entropy added by this suite).
METRICS = ("diversity/distinct_1", "diversity/distinct_2", "diversity/distinct_3", "repetition/ngram_3",
           "repetition/overused_3", "completion_words/mean", "completion_len/mean", "foreign_script_rate",
           "policy_entropy")


def add_args(group) -> None:
    group.add_argument("--samples", type=int, default=4,
                       help="answers per prompt and member (distinct-n is measured within a prompt's answers)")


# ---------------------------------------------------------------------------------------------
# Entropy: recorded from the sampler's output while evals.generate samples


@contextlib.contextmanager
def recording_sampler():
    """While active, every call of evals.generate.sample also stores, per prompt row (tuple of its token
    ids), (sum of the sampled tokens' entropies, number of sampled tokens). Yields that dict.

    Rows map back to prompts by their token ids (evals.generate pads a batch by repeating its first row; the
    repeat has the same key and so the same figures)."""
    import evals.generate as gen

    inner = gen.sample
    rec: dict[tuple, tuple[float, int]] = {}

    def wrapped(model, rows, **kw):
        res = inner(model, rows, **kw)
        g = res.num_samples
        mask = res.completion_mask()
        ent = np.asarray(res.entropy, np.float64) * mask
        for b, row in enumerate(rows):
            r = b * g  # the first sample of prompt b (evals.generate asks for one)
            rec.setdefault(tuple(int(t) for t in row), (float(ent[r].sum()), int(mask[r].sum())))
        return res

    gen.sample = wrapped
    try:
        yield rec
    finally:
        gen.sample = inner


def answers_with_entropy(member, prompts, *, seed, settings, cache_dir, batch_size, progress, desc):
    """(answers, per-answer (entropy_sum, tokens) or None) for one LoadedMember and seed: answers through
    evals.generate.generate_answers (its cache), entropies from the "entropy" cache, sampling again (into a
    throwaway answer cache) only the prompts whose entropy is missing."""
    from evals.generate import DiskCache, _digest, answer_key, generate_answers

    ecache = DiskCache(cache_dir, "entropy")
    ekeys = [_digest("entropy-v1", answer_key(member.fingerprint, p, seed, settings)) for p in prompts]
    kw = dict(seed=seed, settings=settings, batch_size=batch_size, progress=progress, desc=desc)
    with recording_sampler() as rec:
        texts = generate_answers(member, prompts, cache_dir=cache_dir, **kw)
        ents = [ecache.get(k) for k in ekeys]
        tok = member.tokenizer
        ids = {i: tuple(tok.encode_chat(prompts[i], system=settings.system))
               for i, e in enumerate(ents) if e is None}
        again = [i for i in ids if ids[i] not in rec]  # answers that came from the cache without an entropy
        mismatch = set()
        if again:
            with tempfile.TemporaryDirectory() as tmp:
                redo = generate_answers(member, [prompts[i] for i in again], cache_dir=tmp, **kw)
            # a different answer (numerics of another batch shape) would not be the cached answer's entropy
            mismatch = {i for i, t in zip(again, redo) if t != texts[i]}
    for i, key in ids.items():
        hit = None if i in mismatch else rec.get(key)
        ents[i] = {"entropy_sum": hit[0], "tokens": hit[1]} if hit else {"entropy_sum": None, "tokens": None}
        if hit:
            ecache.put(ekeys[i], ents[i])
    return texts, [None if e["tokens"] is None else (e["entropy_sum"], e["tokens"]) for e in ents]


def mean_token_entropy(records) -> float:
    """sum of entropy sums / sum of tokens over the answers that have a record; NaN when none has."""
    recs = [r for r in records if r is not None]
    tokens = sum(t for _, t in recs)
    return float(sum(e for e, _ in recs) / tokens) if tokens else math.nan


# ---------------------------------------------------------------------------------------------
# Tables and charts


def contestant_metrics(texts, prompts, tokenizer, entropy_records) -> dict[str, float]:
    """text_diagnostics of the answers (prompts: each answer's prompt) plus policy_entropy."""
    from rubric_jax.rl.diagnostics import text_diagnostics

    m = text_diagnostics(texts, prompts, tokenizer)
    m["policy_entropy"] = mean_token_entropy(entropy_records) if entropy_records is not None else math.nan
    return m


def format_table(results: dict[str, dict[str, float]], metrics=METRICS) -> str:
    def f(x):
        return "n/a" if x is None or not math.isfinite(x) else f"{x:.4g}"

    out = ["| model | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for name, m in results.items():
        out.append(f"| {name} | " + " | ".join(f(m.get(k)) for k in metrics) + " |")
    return "\n".join(out)


def plot(results: dict[str, dict[str, float]], path: str, title: str, metrics=METRICS) -> str:
    """One small bar chart per metric (their scales differ), one bar per contestant."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = list(results)
    cols = 3
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows + 0.6), dpi=110, squeeze=False)
    colors = [f"C{i % 10}" for i in range(len(names))]
    for ax, key in zip(axes.flat, metrics):
        vals = [results[n].get(key) for n in names]
        vals = [np.nan if v is None else float(v) for v in vals]
        ax.bar(range(len(names)), np.nan_to_num(vals), color=colors)
        for i, v in enumerate(vals):
            if not math.isfinite(v):
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7)
        top = float(np.max(np.nan_to_num(vals)))  # every metric is >= 0; an all-zero panel still starts at 0
        ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
        ax.set_title(key, fontsize=8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=7, rotation=20, ha="right")
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def run(args, tools=None) -> dict:
    from evals.models import ShuffledMember
    from evals.suites.pairwise_elo import DEFAULT_PROMPTS, load_prompts
    from evals.tools import SuiteTools

    tools = tools or SuiteTools(args)
    n = int(args.samples)
    if n < 1:
        raise ValueError("--samples: at least 1 answer per prompt")
    contestants = tools.contestants()
    data = args.data or DEFAULT_PROMPTS
    recs = load_prompts(data, args.prompts)
    prompts = [r["prompt"] for r in recs]
    members = tools.load(contestants)

    results, answers = {}, {}
    for name, ms in members.items():
        texts, text_prompts, ents, tokenizer = [], [], [], None
        for mi, m in enumerate(ms):
            shuffled = isinstance(m, ShuffledMember)
            tokenizer = (m.inner if shuffled else m).tokenizer
            for k in range(n):
                desc = f"{name}[{mi}] s{k}" if len(ms) > 1 else f"{name} s{k}"
                if shuffled:  # evals.generate shuffles the inner member's cached answers; nothing sampled
                    t, e = tools.generate(m, prompts, seed=args.seed + k, desc=desc), [None] * len(prompts)
                else:
                    t, e = answers_with_entropy(m, prompts, **tools.generate_kwargs(seed=args.seed + k, desc=desc))
                texts += t
                ents += e
                # pooled members' answers to one prompt form one group, like one prompt's rollouts
                text_prompts += prompts
        answers[name] = texts
        results[name] = contestant_metrics(texts, text_prompts, tokenizer,
                                           None if all(e is None for e in ents) else ents)
        tools.log(f"diagnostics: {name}: " + ", ".join(f"{k}={results[name][k]:.4g}" for k in METRICS))

    q = len(prompts)
    tools.out.jsonl("answers.jsonl", ({"id": r.get("id", i), "prompt": r["prompt"],
                                       "answers": {nm: a[i::q] for nm, a in answers.items()}}
                                      for i, r in enumerate(recs)))
    title = args.title or f"diagnostics: {', '.join(results)} ({q} prompts x {n} samples)"
    payload = {"title": title, "suite": "diagnostics", "prompts": q, "samples": n, "data": os.path.abspath(data),
               "seed": args.seed, "generation_settings": tools.settings.key(), "metrics": list(METRICS),
               "models": results,
               "specs": {nm: [m.spec.label for m in ms] for nm, ms in members.items()},
               "fingerprints": {nm: [m.fingerprint for m in ms] for nm, ms in members.items()}}
    tools.out.json("results.json", payload)
    plot(results, tools.out.path("diagnostics.png"), title)
    table = format_table(results)
    tools.out.text("report.md", f"# {title}\n\nThe trainer's metric names (rubric_jax.rl.diagnostics). distinct-n "
                   f"within each prompt's {n} samples; policy_entropy: mean per-token entropy of the sampled "
                   f"tokens' distributions (n/a for shuffled answers, which were not sampled in that order).\n\n"
                   f"{table}\n\n![diagnostics](diagnostics.png)\n")
    print(table, flush=True)  # the result on stdout, as pairwise_elo does; --quiet silences progress only
    return payload
