"""Judge throughput on an embedded model (a benchmark, not a test; default SmolLM2).

G responses of R tokens to a P-token prompt, C criteria (the creative-writing rubric), all pairs in
both orders: G (G - 1) C pairwise judgments. Pairwise judgments per second for

  (a) tree   the prefix-shared logit judge (heads shared by all pairs with the same first response,
             bodies shared by all criteria, criteria packed as tree-masked suffixes)
  (b) none   the same verdict readout without sharing: every judgment re-encodes its whole sequence
  (c) gen    our generate mode: generate-then-parse without sharing, >= 16 generated tokens per
             judgment (what a framework calling a judge server does)
  (d) hf     the peer: transformers' generate writing a 16-token verdict for the same judgment
             sequences (greedy, left-padded batches of --hf_batch, torch threads = cores)
  (e) hff    the peer of a logit judge: transformers' forward over the same judgment sequences (all G
             responses), the two verdict labels read at the last position, in the run's dtype; the
             verdicts of (a) and (e) are compared (max |p_first difference|)

Each of our variants runs once to compile, then is timed (`--repeat` runs, best kept); transformers'
(d) and (e) warm up on their first batch only (nothing to compile); on 2 CPU cores the five legs together
take about 25 minutes (1512 s, f32 SmolLM2, nothing else running). The judgment cache is off. (b), (c) and
(d) are timed on the first `--baseline_g` responses (all their ordered pairs, all criteria) unless --full:
their per-judgment cost does not depend on G, and on CPU the full set takes many minutes. Prints a table
with ratios, writes JSON (--out), and with --profile_dir writes a jax.profiler trace of one (a) pass.

    python benchmarks/judge.py --out /tmp/judge_bench.json
    python benchmarks/judge.py --model=qwen2.5-coder-1.5b-instruct --g=4 --criteria=2 --skip=none,gen,hf \
        [--dtype=bfloat16] --out /tmp/judge_bench_1p5b.json     # the 1.5B judge against transformers' forward
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rubric_jax import load_model, load_tokenizer  # noqa: E402
from rubric_jax.judge import Judge  # noqa: E402
from rubric_jax.rubrics import load_rubric  # noqa: E402

WORDS = ("the old lighthouse keeper watched storm roll over grey sea while her daughter counted ships that never "
         "came home one night a small boat appeared carrying letter written in strange hand she opened it and "
         "found map of island nobody had seen for hundred years wind howled through broken windows as they "
         "decided to follow at dawn gulls cried above rocks waves crashed against cliffs memory of lost father "
         "returned quiet courage grew inside them both").split()


def text_of_tokens(tok, n: int, seed: int) -> str:
    """Deterministic story-like text that encodes to exactly n tokens (re-encoding checked)."""
    rng = random.Random(seed)
    words = []
    while len(tok.encode(" ".join(words))) < n + 8:
        sent = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        sent[0] = sent[0].capitalize()
        words.extend(sent[:-1] + [sent[-1] + "."])
    ids = tok.encode(" ".join(words))[:n]
    text = tok.decode(ids)
    for _ in range(5):  # decode/encode round trips can shift a token; trim until exact
        ids = tok.encode(text)
        if len(ids) == n:
            return text
        text = tok.decode(ids[:n])
    return text


def timed(fn, repeat: int, warm=None):
    """(best wall seconds, process CPU seconds of that run) after one compiling run (`warm`, default `fn`).

    CPU seconds (all threads) are reported too: on a shared machine they track the work done
    better than wall time does."""
    (warm or fn)()  # compile (ours); transformers needs no compilation, only its first batch's allocations
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
    return best


def _left_padded(seqs, batch: int, pad: int):
    """(start index, ids, attention mask) torch batches of `batch` sequences, left-padded with `pad`."""
    import torch

    for lo in range(0, len(seqs), batch):
        chunk = seqs[lo:lo + batch]
        t = max(map(len, chunk))
        yield (lo, torch.tensor([[pad] * (t - len(s)) + s for s in chunk]),
               torch.tensor([[0] * (t - len(s)) + [1] * len(s) for s in chunk]))


def time_hf(args, tok, prompt, responses, crits):
    """transformers generating a verdict of gen_tokens tokens for every ordered pair and criterion."""
    import torch

    from rubric_jax.judge.prompts import PromptBuilder

    hf = _hf_model(args)
    pb = PromptBuilder(tok)
    p_ids = list(tok.encode(prompt))
    r_ids = [list(tok.encode(r))[: args.response_tokens] for r in responses]
    g = len(responses)
    seqs = [list(pb.head("pair", p_ids, r_ids[a], generate=True)) + list(pb.body(r_ids[b], generate=True))
            + list(pb.suffix("pair", c, generate=True)) for a in range(g) for b in range(g) if a != b for c in crits]
    pad = tok.pad_id

    def run(seqs=seqs):
        for _, ids, am in _left_padded(seqs, args.hf_batch, pad):
            with torch.no_grad():
                hf.generate(input_ids=ids, attention_mask=am, max_new_tokens=args.gen_tokens,
                            min_new_tokens=args.gen_tokens, do_sample=False, pad_token_id=pad)

    secs, cpu = timed(run, args.repeat, warm=lambda: run(seqs[: args.hf_batch]))
    n = len(seqs)
    return dict(judgments=n, seconds=secs, judgments_per_s=n / secs, cpu_seconds=cpu, judgments_per_cpu_s=n / cpu,
                g=g, batch=args.hf_batch, gen_tokens=args.gen_tokens)


def _hf_model(args):
    import torch
    import transformers

    from rubric_jax.models.loading import resolve_checkpoint

    torch.set_num_threads(os.cpu_count() or 1)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
    path = resolve_checkpoint(args.model)
    if path.endswith(".gguf"):
        hf = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                               dtype=dtype)
    else:
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return hf.eval()


def time_hf_forward(args, tok, prompt, responses, crits):
    """The peer of (a) for a judge read by its logits: transformers' forward over every judgment's whole
    sequence (the same tokens our engine scores, no sharing), the two verdict labels read at its last position.
    Returns the timing row and p_first (G, G, C) to check that both read the same verdicts."""
    import torch

    from rubric_jax.judge.prompts import PromptBuilder

    hf = _hf_model(args)
    pb = PromptBuilder(tok)
    labels = list(pb.label_ids)
    p_ids = list(tok.encode(prompt))
    r_ids = [list(tok.encode(r))[: args.response_tokens] for r in responses]
    g = len(responses)
    keys = [(a, b, ci) for a in range(g) for b in range(g) if a != b for ci in range(len(crits))]
    seqs = [list(pb.head("pair", p_ids, r_ids[a])) + list(pb.body(r_ids[b])) + list(pb.suffix("pair", crits[ci]))
            for a, b, ci in keys]
    pad = tok.pad_id
    p_first = np.full((g, g, len(crits)), np.nan)

    def run(seqs=seqs):
        for lo, ids, am in _left_padded(seqs, args.hf_batch, pad):
            pos = (am.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                last = hf(input_ids=ids, attention_mask=am, position_ids=pos, logits_to_keep=1).logits[:, -1]
            two = torch.softmax(last[:, labels].float(), -1)[:, 0].numpy()
            for k, v in zip(keys[lo:lo + len(ids)], two):
                p_first[k] = v

    secs, cpu = timed(run, args.repeat, warm=lambda: run(seqs[: args.hf_batch]))
    n = len(seqs)
    return dict(judgments=n, seconds=secs, judgments_per_s=n / secs, cpu_seconds=cpu, judgments_per_cpu_s=n / cpu,
                g=g, batch=args.hf_batch, tokens=sum(map(len, seqs))), p_first


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--g", type=int, default=8)
    ap.add_argument("--response_tokens", type=int, default=128)
    ap.add_argument("--prompt_tokens", type=int, default=64)
    ap.add_argument("--criteria", type=int, default=13)
    ap.add_argument("--gen_tokens", type=int, default=16)
    ap.add_argument("--baseline_g", type=int, default=3, help="responses used to time (b), (c) and (d)")
    ap.add_argument("--full", action="store_true", help="time (b), (c) and (d) on all G responses too")
    ap.add_argument("--skip", default="", help="comma list of variants to skip: tree,none,gen,hf,hff")
    ap.add_argument("--hf_batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tokens_per_call", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--profile_dir", default="")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    model = load_model(args.model, dtype=jnp.dtype(args.dtype))
    tok = load_tokenizer(args.model)
    print(f"loaded {args.model} ({args.dtype}) in {time.perf_counter() - t0:.1f}s on {jax.default_backend()}",
          flush=True)
    prompt = text_of_tokens(tok, args.prompt_tokens, seed=1000)
    responses = [text_of_tokens(tok, args.response_tokens, seed=i) for i in range(args.g)]
    crits = list(load_rubric("creative_writing"))[: args.criteria]
    g, c = args.g, len(crits)
    bg = g if args.full else min(args.baseline_g, g)
    common = dict(cache_entries=0, max_response_tokens=args.response_tokens, max_prompt_tokens=args.prompt_tokens)
    if args.tokens_per_call:
        common["tokens_per_call"] = args.tokens_per_call
    skip = set(filter(None, args.skip.split(",")))
    rows = {}

    def run_variant(name, judge, n_resp, **kw):
        n = n_resp * (n_resp - 1) * c
        fn = lambda: judge.pairwise(prompt, responses[:n_resp], crits, **kw)  # noqa: E731
        secs, cpu = timed(fn, args.repeat)
        st = judge.stats
        rows[name] = dict(judgments=n, seconds=secs, judgments_per_s=n / secs, cpu_seconds=cpu,
                          judgments_per_cpu_s=n / cpu, g=n_resp,
                          compilations=st.compilations, padded_tokens_per_pass=st.padded_tokens // (args.repeat + 1),
                          real_tokens_per_pass=st.real_tokens // (args.repeat + 1),
                          generated_tokens_per_judgment=st.generated_tokens / max(1, st.judgments))
        print(f"  {name:5s} {n:5d} judgments  {secs:8.2f}s (cpu {cpu:8.2f}s)  {n / secs:9.2f} judg/s  "
              f"(tokens/pass: padded {rows[name]['padded_tokens_per_pass']}, "
              f"real {rows[name]['real_tokens_per_pass']})",
              flush=True)
        return judge

    if "tree" not in skip:
        ja = run_variant("tree", Judge(model, tok, sharing="tree", **common), g)
        if args.profile_dir:
            jax.profiler.start_trace(args.profile_dir)
            ja.pairwise(prompt, responses, crits)
            jax.profiler.stop_trace()
            print(f"  profile trace written to {args.profile_dir}")
    if "none" not in skip:
        run_variant("none", Judge(model, tok, sharing="none", **common), bg)
    if "gen" not in skip:
        n_gen = bg * (bg - 1) * c
        run_variant("gen", Judge(model, tok, mode="generate", gen_max_new_tokens=args.gen_tokens, gen_ignore_eos=True,
                                 gen_batch=n_gen, **common), bg)

    if "hff" not in skip:
        # on all G responses, like (a): the two must read the same verdicts on the same sequences
        rows["hff"], hf_p_first = time_hf_forward(args, tok, prompt, responses, crits)
        r = rows["hff"]
        print(f"  hff   {r['judgments']:5d} judgments  {r['seconds']:8.2f}s (cpu {r['cpu_seconds']:8.2f}s)  "
              f"{r['judgments_per_s']:9.2f} judg/s", flush=True)
        if "tree" not in skip:
            ours = ja.pairwise(prompt, responses, crits, mode="logit").p_first
            r["max_abs_p_first_diff_vs_a"] = float(np.nanmax(np.abs(ours - hf_p_first)))
            print(f"  (a) and hff read the same verdicts: max |p_first difference| {r['max_abs_p_first_diff_vs_a']:.2e}")
    if "hf" not in skip:
        rows["hf"] = time_hf(args, tok, prompt, responses[:bg], crits)
        r = rows["hf"]
        print(f"  hf    {r['judgments']:5d} judgments  {r['seconds']:8.2f}s (cpu {r['cpu_seconds']:8.2f}s)  "
              f"{r['judgments_per_s']:9.2f} judg/s", flush=True)

    print(f"\n{args.model} judge, G={g}, response {args.response_tokens} tok, prompt {args.prompt_tokens} tok, C={c}, "
          f"all pairs x both orders, {jax.default_backend()} {args.dtype}")
    print(f"{'variant':38s} {'judgments':>9s} {'seconds':>9s} {'judg/s':>9s} {'a / x':>7s} "
          f"{'cpu s':>9s} {'judg/cpu s':>10s} {'a / x':>7s}")
    names = {"tree": "(a) prefix-shared logit judge", "none": "(b) no prefix sharing",
             "gen": f"(c) generate {args.gen_tokens} tok then parse", "hf": f"(d) transformers generate {args.gen_tokens}",
             "hff": "(e) transformers forward, labels read"}
    a_rate = rows.get("tree", {}).get("judgments_per_s")
    a_cpu = rows.get("tree", {}).get("judgments_per_cpu_s")
    for key, label in names.items():
        if key not in rows:
            continue
        r = rows[key]
        ratio = a_rate / r["judgments_per_s"] if a_rate else float("nan")
        ratio_cpu = a_cpu / r["judgments_per_cpu_s"] if a_cpu else float("nan")
        print(f"{label:38s} {r['judgments']:9d} {r['seconds']:9.2f} {r['judgments_per_s']:9.2f} {ratio:6.1f}x "
              f"{r['cpu_seconds']:9.2f} {r['judgments_per_cpu_s']:10.2f} {ratio_cpu:6.1f}x")
    summary = {}
    for key, tag in (("none", "b"), ("gen", "c"), ("hf", "d"), ("hff", "e")):
        if a_rate and key in rows:
            summary[f"a_over_{tag}"] = a_rate / rows[key]["judgments_per_s"]
            summary[f"a_over_{tag}_cpu"] = a_cpu / rows[key]["judgments_per_cpu_s"]
    if "gen" in rows and "hf" in rows:
        summary["c_over_d"] = rows["gen"]["judgments_per_s"] / rows["hf"]["judgments_per_s"]
    print("targets: a/b >= 3x, a/d >= 10x, a/e >= 1x (c/d reported);", {k: round(v, 2) for k, v in summary.items()})
    if args.out:
        out = dict(config=vars(args), backend=jax.default_backend(), device=str(jax.devices()[0]),
                   machine=platform.machine(), rows=rows, summary=summary)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
