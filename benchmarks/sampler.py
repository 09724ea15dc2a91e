"""Sampler throughput: our prefill + on-device decode loop vs transformers' generate, same weights, same run.

    python benchmarks/sampler.py                       # embedded SmolLM2-135M, f32, vs transformers (CPU)
    python benchmarks/sampler.py --model qwen3-0.6b --reps 2   # random Qwen3-0.6B weights
    python benchmarks/sampler.py --dtype bfloat16      # both sides in bf16
    python benchmarks/sampler.py --model qwen2.5-coder-1.5b-instruct --new_tokens 32 --reps 1
                                                       # the 1.5B judge (pip install -e ".[judge]"; 6 min, 16 GB)

transformers runs the very weights ours does (exported with `export_hf` in the run's dtype). Prints a table
(prefill and decode tokens/s, the ratio to transformers) and decode's fraction of the
memory-bandwidth bound: a decode step must read every weight once, so weight_bytes / step_time is the
achieved weight-read bandwidth; it is compared to a measured device copy bandwidth (bytes read + written
per second by a large array copy). The step's weight matmuls are also timed alone (no attention, cache
or sampling): the fraction of the bound the backend's matmul kernels reach at this batch, which no decode
step can pass. With a tokenizer (a real checkpoint), the public `rubric_jax.generate`
(text in, text out) is timed too, after one warm-up call, against the token sampler end to end. Writes the
figures as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax import PRESETS, init_model, load_model, load_tokenizer
from rubric_jax.models.export import export_hf
from rubric_jax.models.transformer import param_count
from rubric_jax.sampling import left_pad, prefill, sample

TEXT = ("Once upon a time in a harbour town, a cartographer kept a shop full of maps that no sailor trusted, "
        "because every chart showed an island that did not exist. One winter morning a girl arrived with a "
        "compass whose needle pointed at that very island, and she asked the old man to sail with her. ")


def make_prompts(tokenizer, n, length, vocab):
    if tokenizer is None:
        rng = np.random.RandomState(0)
        return [rng.randint(0, vocab, length).tolist() for _ in range(n)]
    base = tokenizer.encode(TEXT * 4)
    return [base[i:i + length] for i in range(n)]


def copy_bandwidth(nbytes=1 << 29, reps=5):
    """memcpy bandwidth, bytes moved (read + written) per second.

    On CPU: numpy copies into a preallocated buffer, one thread per core (a jitted copy would also time
    page faults of its fresh output). On an accelerator: a jitted device copy.
    """
    if jax.default_backend() == "cpu":
        import threading

        src = np.ones(nbytes // 4, np.float32)
        dst = np.empty_like(src)
        parts = np.array_split(np.arange(src.size), os.cpu_count() or 1)

        def run():
            ts = [threading.Thread(target=np.copyto, args=(dst[p[0]:p[-1] + 1], src[p[0]:p[-1] + 1])) for p in parts]
            [t.start() for t in ts]
            [t.join() for t in ts]
    else:
        x = jnp.ones((nbytes // 4,), jnp.float32)
        f = jax.jit(lambda a: a * 1.0)
        run = lambda: f(x).block_until_ready()
    run()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def time_weight_matmuls(model, batch, reps=10):
    """Seconds for the weight matmuls of one decode step alone, at `batch` rows: every layer's q, k, v, o,
    gate, up and down projection and the unembedding, chained as in the model (each layer's input depends
    on the last layer's output) and nothing else: no attention, norms, cache or sampling. It is the floor
    the backend's matmul kernels put under a decode step; a step cannot beat it without other kernels."""
    layers = model.unstacked_layers()
    tied = model.cfg.tie_word_embeddings
    # the stored matrix, transposed inside the program as the model's own head does (a dot that reads the
    # embedding in place, not a transposed copy)
    head = model.embed_tokens.embedding[...] if tied else model.lm_head.kernel[...]
    dt = model.dtype

    def mm(x, w):
        return jnp.dot(x, w.reshape(x.shape[-1], -1), preferred_element_type=jnp.float32).astype(dt)

    def step(layers, head, x):
        for lay in layers:
            at, ml = lay["self_attn"], lay["mlp"]
            q = mm(x, at["q_proj"]["kernel"][...])
            kv = mm(x, at["k_proj"]["kernel"][...]) + mm(x, at["v_proj"]["kernel"][...])
            q = q + jnp.tile(kv, q.shape[-1] // kv.shape[-1])
            x = x + mm(q, at["o_proj"]["kernel"][...])
            h = jax.nn.silu(mm(x, ml["gate_proj"]["kernel"][...])) * mm(x, ml["up_proj"]["kernel"][...])
            x = x + mm(h, ml["down_proj"]["kernel"][...])
        return mm(x, head.T if tied else head)

    f = jax.jit(step)
    x = jnp.ones((batch, model.cfg.hidden_size), dt) * 0.01
    f(layers, head, x).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(layers, head, x).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return best


def time_ours(model, prompts, new_tokens, pad_id, reps, num_samples=1):
    tokens, mask = left_pad(prompts, pad_id)
    graphdef, state = nnx.split(model)
    pre = jax.jit(lambda s, t, m: prefill(nnx.merge(graphdef, s), t, m)[0])
    pre(state, tokens, mask).block_until_ready()
    kw = dict(max_new_tokens=new_tokens, temperature=0.0, eos_ids=(-1,), pad_id=pad_id, num_samples=num_samples)
    sample(model, prompts, **kw)  # compile
    t_pre, t_all = [], []
    for _ in range(reps):
        t = time.perf_counter()
        pre(state, tokens, mask).block_until_ready()
        t_pre.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = sample(model, prompts, **kw)
        t_all.append(time.perf_counter() - t)
    assert (out.lengths == new_tokens).all()
    return min(t_pre), min(t_all), out


def time_generate(model, tokenizer, prompts, new_tokens, reps):
    """The public text-in, text-out `rubric_jax.generate` on the same prompts (as text, no chat template,
    greedy), after one warm-up call: (best seconds per call, tokens it generated). Its time covers what the
    token sampler's does plus tokenizing, padding, key making and detokenizing."""
    from rubric_jax import generate
    from rubric_jax.sampling.api import generate_tokens

    texts = [tokenizer.decode(p) for p in prompts]
    kw = dict(max_new_tokens=new_tokens, temperature=0.0, chat=False)
    generate(model, tokenizer, texts, **kw)  # compile
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        generate(model, tokenizer, texts, **kw)
        best = min(best, time.perf_counter() - t)
    # the same greedy call again, as tokens: how many it generated (an end-of-text id stops a row early)
    return best, int(generate_tokens(model, tokenizer, texts, **kw).lengths.sum())


def time_torch(folder, prompts, new_tokens, pad_id, reps, threads, dtype="float32"):
    """transformers' prefill and greedy generate on the Hugging Face checkpoint in `folder`."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    ids = torch.tensor(prompts)
    am = torch.ones_like(ids)
    with torch.no_grad():
        hf.generate(ids, attention_mask=am, max_new_tokens=4, do_sample=False, pad_token_id=pad_id)
        t_pre, t_all = [], []
        for _ in range(reps):
            t = time.perf_counter()
            hf(input_ids=ids, attention_mask=am, use_cache=True)
            t_pre.append(time.perf_counter() - t)
            t = time.perf_counter()
            out = hf.generate(ids, attention_mask=am, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              do_sample=False, pad_token_id=pad_id)
            t_all.append(time.perf_counter() - t)
    return min(t_pre), min(t_all), out[:, ids.shape[1]:].numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="embedded name / checkpoint path, or a preset name for random weights")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt_len", type=int, default=64)
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no_torch", action="store_true")
    ap.add_argument("--unrolled", action="store_true", help="run the layers as an unrolled loop instead of a scan")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dtype = jnp.dtype(args.dtype)

    if args.model.lower() in PRESETS:
        model, tokenizer = init_model(PRESETS[args.model.lower()], dtype=dtype), None
    else:
        from rubric_jax.models.loading import resolve_checkpoint

        path = resolve_checkpoint(args.model)
        model, tokenizer = load_model(path, dtype=dtype), load_tokenizer(args.model)
    if args.unrolled:
        model.configure(scan_layers=False)
    pad_id = tokenizer.pad_id if tokenizer else 0
    prompts = make_prompts(tokenizer, args.batch, args.prompt_len, model.cfg.vocab_size)
    weight_bytes = param_count(model) * dtype.itemsize

    ours_pre, ours_all, out = time_ours(model, prompts, args.new_tokens, pad_id, args.reps)
    n_new = args.batch * args.new_tokens
    res = {"model": args.model, "dtype": args.dtype, "batch": args.batch, "prompt_len": args.prompt_len,
           "new_tokens": args.new_tokens, "backend": jax.default_backend(), "device": str(jax.devices()[0]),
           "cpu": platform.processor() or platform.machine(), "threads": args.threads,
           "weight_bytes": weight_bytes, "scan_layers": model.cfg.scan_layers}
    ours_decode = ours_all - ours_pre
    res["ours"] = {"prefill_tok_s": args.batch * args.prompt_len / ours_pre, "decode_tok_s": n_new / ours_decode,
                   "decode_step_ms": 1e3 * ours_decode / args.new_tokens}
    if tokenizer is not None:
        gen_s, gen_tokens = time_generate(model, tokenizer, prompts, args.new_tokens, args.reps)
        # end to end against the token sampler's end to end (prefill included on both sides)
        res["generate"] = {"seconds": gen_s, "tokens": gen_tokens, "tok_s": gen_tokens / gen_s,
                           "sampler_tok_s": n_new / ours_all}
        res["generate"]["ratio_to_sampler"] = res["generate"]["tok_s"] / res["generate"]["sampler_tok_s"]
    bw = copy_bandwidth()
    res["copy_bandwidth_GBs"] = bw / 1e9
    res["ours"]["weight_read_GBs"] = weight_bytes / (ours_decode / args.new_tokens) / 1e9
    res["ours"]["bandwidth_fraction"] = res["ours"]["weight_read_GBs"] * 1e9 / bw
    floor = time_weight_matmuls(model, args.batch)
    res["weight_matmuls"] = {"step_ms": 1e3 * floor, "weight_read_GBs": weight_bytes / floor / 1e9,
                             "bandwidth_fraction": weight_bytes / floor / bw,
                             "share_of_decode_step": floor / (ours_decode / args.new_tokens)}

    if not args.no_torch:
        # transformers loads the very weights we run, exported in the run's dtype: the same numbers on both
        # sides for random presets and real checkpoints alike, and no wait on transformers' GGUF dequantizer
        # (over 15 minutes for the 1.5B judge's Q4_K_M file on this CPU).
        with tempfile.TemporaryDirectory() as tmp:
            t_pre, t_all, hf_tokens = time_torch(export_hf(model, tmp, dtype=args.dtype), prompts, args.new_tokens,
                                                 pad_id, args.reps, args.threads, args.dtype)
        t_dec = t_all - t_pre
        res["transformers"] = {"prefill_tok_s": args.batch * args.prompt_len / t_pre, "decode_tok_s": n_new / t_dec,
                               "decode_step_ms": 1e3 * t_dec / args.new_tokens}
        res["decode_ratio"] = res["ours"]["decode_tok_s"] / res["transformers"]["decode_tok_s"]
        res["prefill_ratio"] = res["ours"]["prefill_tok_s"] / res["transformers"]["prefill_tok_s"]
        res["greedy_tokens_identical_rows"] = int((hf_tokens == out.tokens).all(axis=1).sum())

    print(f"\nsampler benchmark: {args.model} {args.dtype}, {args.batch} prompts x {args.prompt_len} tokens, "
          f"{args.new_tokens} new tokens (greedy), backend={res['backend']}")
    print(f"{'':16s}{'prefill tok/s':>16s}{'decode tok/s':>16s}{'ms/step':>10s}")
    for name in ("ours", "transformers"):
        if name in res:
            r = res[name]
            print(f"{name:16s}{r['prefill_tok_s']:16.1f}{r['decode_tok_s']:16.1f}{r['decode_step_ms']:10.2f}")
    if "decode_ratio" in res:
        print(f"{'ratio':16s}{res['prefill_ratio']:15.2f}x{res['decode_ratio']:15.2f}x")
        print(f"greedy rows identical to transformers: {res['greedy_tokens_identical_rows']}/{args.batch}")
    if "generate" in res:
        g = res["generate"]
        print(f"rubric_jax.generate (text in, text out): {g['tok_s']:.1f} tok/s end to end ({g['tokens']} tokens) "
              f"vs the token sampler's {g['sampler_tok_s']:.1f} end to end: {g['ratio_to_sampler']:.2f}x")
    print(f"decode weight reads {res['ours']['weight_read_GBs']:.2f} GB/s vs copy bandwidth "
          f"{res['copy_bandwidth_GBs']:.2f} GB/s -> {100 * res['ours']['bandwidth_fraction']:.1f}% of the bound")
    w = res["weight_matmuls"]
    print(f"the step's weight matmuls alone (batch {args.batch}, no attention): {w['step_ms']:.2f} ms = "
          f"{100 * w['bandwidth_fraction']:.1f}% of the bound, {100 * w['share_of_decode_step']:.0f}% of a decode step")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
