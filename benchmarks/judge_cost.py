"""What the judge costs on the IFEval learning runs' own rollouts (a benchmark, not a test).

The policy samples G responses to each of two training prompts per set (the learning configs' step:
`rubric_jax.config_base.ifeval_learning`, temperature 1, top-k 20, top-p 0.8, <= 160 tokens), and the judge scores
each set the way a run's reward phase does, the judgment cache off:

  verify     RLMR's verifier, every (rollout, instruction) in both label orders (learn_ifeval_judged / _selfjudged)
  pairwise   the group's pairs (`--pairing`, `--circular_k`) in both orders on each instruction
             (learn_ifeval_pairwise), `--questions` readings

Per kind and dtype it prints and writes (--out) the padded and real tokens the device ran, their ratio, and the
seconds of each set: the first set compiles, the later ones give the steady time per set (one set = the judging
of one batch of a training step; a step with the dynamic refill judges two). --dry counts the tokens only (the
device calls replaced by zeros: seconds, not minutes).

    python benchmarks/judge_cost.py --kinds=verify --dtypes=float32,bfloat16 --out /tmp/judge_cost.json
    python benchmarks/judge_cost.py --kinds=verify,pairwise --dry --out /tmp/judge_tokens.json
    python benchmarks/judge_cost.py --kinds=pairwise --questions=worse --pairing=circular --out /tmp/pw.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax.numpy as jnp  # noqa: E402

from rubric_jax import load_model, load_tokenizer  # noqa: E402
from rubric_jax.data import load_jsonl  # noqa: E402
from rubric_jax.judge import Judge, JudgeConfig, forward  # noqa: E402
from rubric_jax.rubrics import Rubric  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rubric_jax", "data",
                    "ifeval_train.jsonl")

PAIRS = ((2, 5), (7, 11), (14, 20))  # the records of the first sets (docs/benchmarks.md's figures)


def sample_sets(policy: str, data: str, n_sets: int, g: int, max_new: int) -> list[dict]:
    """n_sets sets of two training prompts (PAIRS, then every 7th record: one- and two-instruction prompts mix),
    each answered g times by the policy, set s sampled with seed s."""
    from rubric_jax.sampling import sample

    tok, model = load_tokenizer(policy), load_model(policy)
    records = load_jsonl(data)
    sets = []
    for s in range(n_sets):
        pair = PAIRS[s] if s < len(PAIRS) else (7 * s % len(records), (7 * s + 3) % len(records))
        recs = [records[i] for i in pair]
        out = sample(model, [tok.encode_chat(r.prompt) for r in recs], max_new_tokens=max_new, num_samples=g,
                     temperature=1.0, top_k=20, top_p=0.8, eos_ids=tok.eos_ids, pad_id=tok.pad_id, seed=s)
        texts = [tok.decode(c) for c in out.completions()]
        sets.append({"records": recs, "responses": [texts[:g], texts[g:]],
                     "lengths": [int(x) for x in out.lengths]})
    return sets


def _dry_forward(graphdef, state, htok, hmask, btok, bvalid, ltok, lseg, lrel, read, ids):
    hn, j, r = read.shape
    return jnp.zeros((hn, j, r, ids.shape[0])), jnp.zeros((hn, j, r))


def judge_sets(judge: Judge, kind: str, sets: list[dict]) -> list[dict]:
    rows = []
    for s in sets:
        recs, responses = s["records"], s["responses"]
        prompts = [r.prompt for r in recs]
        before = (judge.stats.real_tokens, judge.stats.padded_tokens)
        t0 = time.perf_counter()
        if kind == "verify":
            judge.verify_batch(prompts, responses, [[c["text"] for c in r.constraints] for r in recs])
        else:
            judge.pairwise_batch(prompts, responses, [list(Rubric.from_dict(r.rubric).criteria) for r in recs])
        rows.append({"seconds": time.perf_counter() - t0, "real": judge.stats.real_tokens - before[0],
                     "padded": judge.stats.padded_tokens - before[1]})
    return rows


def measure(args, kinds: list[str]) -> tuple[list[dict], list[dict]]:
    """(one row per dtype and kind, the sampled sets)."""
    sets = sample_sets(args.policy, args.data, args.sets, args.g, args.max_new)
    jtok = load_tokenizer(args.judge)
    results = []
    for dtype in [d for d in args.dtypes.split(",") if d]:
        model = load_model(args.judge, jnp.dtype(dtype))
        for kind in kinds:
            judge = Judge(model, jtok, JudgeConfig(cache_entries=0, questions=args.questions, pairing=args.pairing,
                                                   circular_k=args.circular_k))
            rows = judge_sets(judge, kind, sets)
            later = rows[1:] or rows  # the first set compiles
            real, padded = sum(r["real"] for r in rows), sum(r["padded"] for r in rows)
            results.append({"kind": kind, "dtype": dtype, "sets": rows, "real_tokens": real, "padded_tokens": padded,
                            "real_fraction": real / max(padded, 1),
                            "steady_seconds_per_set": sum(r["seconds"] for r in later) / len(later),
                            "padded_tokens_per_second": (sum(r["padded"] for r in later) /
                                                         max(sum(r["seconds"] for r in later), 1e-9))})
        del model
    return results, sets


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="smollm2-135m-instruct")
    p.add_argument("--judge", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--data", default=DATA)
    p.add_argument("--kinds", default="verify,pairwise")
    p.add_argument("--questions", default="both", help="pairwise readings: better | worse | both")
    p.add_argument("--pairing", default="all", help="pairwise pairs: all | circular")
    p.add_argument("--circular_k", type=int, default=1, help="ring neighbours on each side (--pairing=circular)")
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--sets", type=int, default=3)
    p.add_argument("--g", type=int, default=8)
    p.add_argument("--max_new", type=int, default=160)
    p.add_argument("--dry", action="store_true", help="count tokens only: no device calls")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if set(kinds) - {"verify", "pairwise"}:
        p.error(f"--kinds: verify and/or pairwise, got {kinds}")
    real_forward = forward.tree_score_jit
    if args.dry:
        forward.tree_score_jit = _dry_forward
    try:
        results, sets = measure(args, kinds)
    finally:
        forward.tree_score_jit = real_forward
    print(f"judge {args.judge} on {args.policy}'s rollouts: {args.sets} sets of 2 prompts x G={args.g}"
          f"{' (dry: tokens only)' if args.dry else ''}")
    print("| kind | dtype | padded tokens / set | real fraction | s / set (first, steady) | padded tokens/s |")
    print("|---|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['kind']} | {r['dtype']} | {r['padded_tokens'] / args.sets:.0f} | {r['real_fraction']:.2f} | "
              f"{r['sets'][0]['seconds']:.1f}, {r['steady_seconds_per_set']:.1f} | "
              f"{r['padded_tokens_per_second']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "machine": platform.processor() or platform.machine(),
                       "cpus": os.cpu_count(), "results": results,
                       "lengths": [s["lengths"] for s in sets]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
