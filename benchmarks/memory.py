"""Device memory of the paper-scale programs, from AOT compilation of abstract shapes (nothing is allocated).

    python benchmarks/memory.py                       # Qwen3-4B, 1 and 8 devices: 9 min on 2 CPU cores
                                                      # (15 min when the machine is shared)
    python benchmarks/memory.py --model tiny --devices 1,2 --json /tmp/memory.json   # same structure, small

Every program is the one the trainer runs, compiled with `jit(...).lower(abstract args).compile()` from
jax.ShapeDtypeStruct / nnx.eval_shape shapes; its `memory_analysis()` is printed per device: arguments,
outputs, temporaries, aliased (donated) bytes and total = args + outputs + temps - aliases. Settings are
configs/rcrl.py's (bf16 weights, LoRA r=32 alpha=32 dropout 0.05 on all projections, 8 prompts x G=8,
prompt 768 + completion 1024 tokens, Dr. GRPO loss, AdamW):

  train/grad   rl.policy._grad_jit: LoRA gradients of the GRPO loss with the chunked log-prob head, one
               micro-batch (8 x 1792 tokens), for each remat policy x attention kernel. "step" adds what
               stays resident across the trainer's calls: AdamW state + the gradient accumulator.
  train/apply  rl.policy._apply_jit, the optimizer update, compiled separately (remat/attention do not enter).
  sample       sampling.sampler._sample_jit, whole: prefill of 8 x 768 prompt tokens, then the while-loop
               decode of 64 rows x 1024 new tokens (1792 context), top-k 20, top-p 0.8, LoRA unmerged.
  judge        judge.forward.tree_score_jit at the shape the judge engine itself plans (default JudgeConfig,
               the accelerator tokens_per_call of 131072) for one step's judging: 8 prompts x G=8 responses
               of 1024 tokens, 768-token prompts, all 13 creative-writing criteria, all ordered pairs.

Each on 1 device (no mesh, as config.mesh="") and on N devices (mesh fsdp:N; parameters sharded by their
logical axes with models.sharding.state_shardings; batch inputs replicated, as the trainer passes them).
Devices beyond the machine's accelerators are XLA:CPU host devices (--xla_force_host_platform_device_count,
set below before JAX starts, with two LLVM flags that only cut compile time: buffer assignment, hence every
figure, is unchanged, as checked on XLA:CPU).

CAVEAT: on a CPU backend the figures are "CPU-compile estimates". XLA:CPU computes bf16 dots in f32: it keeps
f32 copies of the stacked bf16 weights (about 15 GiB for Qwen3-4B on one device) and f32 saved activations,
and it fuses and schedules differently from XLA:GPU, so temporaries come out larger than on a GPU. Use them
to compare settings; on a GPU the same script prints the compiled GPU figures (labelled by backend), and
only there are the cudnn rows compiled ("n/a" on CPU).

Expect (Qwen3-4B, CPU estimates, 1 device): 7.7 GiB of arguments (bf16 weights + f32 adapters); the
train/grad total from ~570 GiB (remat none, plain attention: every layer's (B, N, T, T) scores kept for the
backward) down to ~37 GiB (full remat, chunked attention), dots_saveable ~150 GiB; sample ~42 GiB, judge
~58 GiB. On fsdp:8 the train/grad rows shrink about 8x (batch and weights both sharded). The summary says
whether the best and the configured (config.forward) combinations fit the 80 GiB target on one device.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import sys
import time
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def _max_devices(argv) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--devices", default="1,8")
    return max(int(x) for x in pre.parse_known_args(argv)[0].devices.split(","))


if __name__ == "__main__":  # XLA reads its flags once, when JAX starts
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *FAST_COMPILE,
                                        f"--xla_force_host_platform_device_count={_max_devices(sys.argv[1:])}"])
    sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding  # noqa: E402

from rubric_jax.models.config import ModelConfig  # noqa: E402
from rubric_jax.models.lora import LoRAConfig, apply_lora  # noqa: E402
from rubric_jax.models.sharding import make_mesh, state_shardings, use_mesh  # noqa: E402
from rubric_jax.models.transformer import Transformer  # noqa: E402
from rubric_jax.rl.policy import compiled_bytes  # noqa: E402

# Qwen3-4B, from its public config.json.
QWEN3_4B = ModelConfig(arch="qwen3", vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_layers=36,
                       num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, max_position_embeddings=40960, eos_token_ids=(151645, 151643),
                       name="qwen3-4b")
# Same structure (qk-norm, tied, GQA, head_dim != hidden / heads), compiles in seconds.
TINY = ModelConfig(arch="qwen3", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                   num_kv_heads=2, head_dim=32, tie_word_embeddings=True, eos_token_ids=(151645, 151643),
                   name="tiny")
PAD_ID = 151643  # Qwen3's <|endoftext|>
TARGET_GIB = 80
FIELDS = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "total_bytes")


@dataclasses.dataclass(frozen=True)
class Sizes:
    micro_batch: int
    prompt: int
    completion: int
    prompts: int  # per step
    group: int  # G
    criteria: int
    tokens_per_call: int = 131072  # the judge engine's accelerator default
    attention_chunk: int | None = None  # None: config.forward's
    logprob_chunk: int | None = None  # None: PolicyConfig's


def rcrl_config():
    spec = importlib.util.spec_from_file_location("rcrl_config", os.path.join(ROOT, "configs", "rcrl.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def setting(name: str, c):
    if name == "tiny":
        return TINY, Sizes(4, 16, 16, 1, 2, 3, tokens_per_call=2048, attention_chunk=8, logprob_chunk=8), \
            LoRAConfig(rank=4, alpha=8.0, dropout=c.lora.dropout, targets=tuple(c.lora.targets))
    return QWEN3_4B, Sizes(c.loss.micro_batch_size, c.max_prompt_len, c.max_completion_len, c.prompts_per_step,
                           c.group_size, 13), \
        LoRAConfig(rank=c.lora.rank, alpha=c.lora.alpha, dropout=c.lora.dropout, targets=tuple(c.lora.targets))


# ---------------------------------------------------------------------------------------------
# Abstract arguments

def _is_var(x) -> bool:
    return isinstance(x, nnx.Variable)


def placed_state(state, mesh, dev):
    """An abstract nnx.State whose ShapeDtypeStructs carry their shardings (logical axes on a mesh, else `dev`)."""
    sh = state_shardings(state, mesh) if mesh is not None else jax.tree.map(
            lambda v: SingleDeviceSharding(dev), state, is_leaf=_is_var)
    return jax.tree.map(lambda v, s: v.replace(jax.ShapeDtypeStruct(v.get_value().shape, v.get_value().dtype,
                                                                    sharding=s)), state, sh, is_leaf=_is_var)


def spec(shape, dtype, mesh, dev):
    """A replicated input (the trainer passes host arrays) of this shape."""
    sh = NamedSharding(mesh, PartitionSpec()) if mesh is not None else SingleDeviceSharding(dev)
    return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=sh)


def per_device_bytes(tree) -> int:
    return sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def judge_call_args(base, sizes: Sizes, c):
    """The scoring call's input shapes as the judge engine plans them for one step of the run: the engine's
    own packing and bucketing, with the device call replaced by a recorder (nothing runs)."""
    from rubric_jax.judge import Judge, forward
    from rubric_jax.judge.common import judge_config
    from rubric_jax.models.tokenizer import load_tokenizer
    from rubric_jax.rubrics import load_rubric

    tok = load_tokenizer("qwen3")
    crits = list(load_rubric(c.rubric))[: sizes.criteria]
    judge = Judge(base, tok, judge_config(c), model_id="memory-benchmark",
                  max_response_tokens=sizes.completion, cache_entries=0, tokens_per_call=sizes.tokens_per_call)
    judge.reserve(crits)
    seen = []

    def record(graphdef, state, *args):
        seen.append(tuple(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args))
        hn, jn, r = np.shape(args[7])
        return np.zeros((hn, jn, r, len(args[8])), np.float32), np.zeros((hn, jn, r), np.float32)

    # Distinct texts of exactly the budgeted lengths (" word" is one Qwen3 token).
    prompts = [f"Prompt {q}:" + " word" * sizes.prompt for q in range(sizes.prompts)]
    responses = [[f"Story {q} {i}:" + " word" * sizes.completion for i in range(sizes.group)] for q in prompts]
    prompts = [tok.decode(tok.encode(p)[: sizes.prompt]) for p in prompts]
    with mock.patch.object(forward, "tree_score_jit", record):
        judge.pairwise_batch(prompts, responses, crits)
    args = max(seen, key=lambda a: sum(int(np.prod(x.shape)) for x in a))
    dims = args[0].shape + args[2].shape[1:] + args[4].shape[2:] + args[7].shape[-1:]
    return args, dict(zip(("hn", "t1", "jn", "tb", "lc", "lane", "r"), dims))


# ---------------------------------------------------------------------------------------------
# Compilation

def memory_row(fn, args, kwargs, mesh) -> dict:
    t0 = time.perf_counter()
    with use_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        row = compiled_bytes(fn.lower(*args, **kwargs).compile())
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    row["status"] = "ok"
    return row


def devices_for(n: int):
    for devs in (jax.devices(), jax.devices("cpu")):
        if len(devs) >= n:
            return devs[:n]
    raise SystemExit(f"{n} devices requested, {len(jax.devices('cpu'))} CPU devices: run this file as a script "
                     f"(it sets --xla_force_host_platform_device_count before JAX starts)")


def run(args) -> dict:
    from rubric_jax.judge import forward
    from rubric_jax.rl import forward_plan
    from rubric_jax.rl.losses import LossConfig
    from rubric_jax.rl.policy import PolicyConfig, _apply_jit, _grad_jit, make_optimizer
    from rubric_jax.sampling.sampler import _sample_jit

    c = rcrl_config()
    cfg, sz, lora_cfg = setting(args.model, c)
    fwd = c.forward.to_dict()
    cfg = cfg.replace(scan_layers=fwd["scan_layers"], attention_chunk=sz.attention_chunk or fwd["attention_chunk"])
    dtype = jnp.dtype(c.dtype)
    loss_cfg = LossConfig(aggregation=c.loss.aggregation, eps_low=c.loss.eps_low, eps_high=c.loss.eps_high,
                          dual_clip=c.loss.dual_clip or None, kl_coef=c.loss.kl_coef, kl_kind=c.loss.kl_kind,
                          max_completion_len=sz.completion)
    optimizer = make_optimizer(c.optim.lr, warmup_steps=c.optim.warmup_steps, total_steps=c.steps,
                               weight_decay=c.optim.weight_decay, max_grad_norm=c.optim.max_grad_norm,
                               schedule=c.optim.schedule)
    chunk = sz.logprob_chunk or PolicyConfig().logprob_chunk

    def policy_model(**runtime):  # shapes only: nothing of model size is allocated
        return nnx.eval_shape(lambda: apply_lora(Transformer(cfg.replace(**runtime), dtype=dtype, rngs=nnx.Rngs(0)),
                                                 lora_cfg, seed=c.seed))

    # the frozen base never takes gradients: "auto" loads it as the run does (rl.forward_plan.inference_runtime)
    base_runtime = forward_plan.inference_runtime(dict(remat=fwd["remat"], attention=fwd["attention"]))
    base = nnx.eval_shape(lambda: Transformer(cfg.replace(**base_runtime), dtype=dtype, rngs=nnx.Rngs(0)))
    judge_args, judge_shape = ((), {}) if "judge" not in args.programs else judge_call_args(base, sz, c)
    key = jax.eval_shape(lambda: jax.random.key(0))
    b, tp, tc = sz.micro_batch, sz.prompt, sz.completion
    jobs = []  # (program, remat, attention, build(mesh, dev) -> (jitted fn, args, static kwargs, resident bytes))

    def grad_job(remat, attn):
        def build(mesh, dev):
            g, lora, rest = nnx.split(policy_model(remat=remat, attention=attn), nnx.LoRAParam, ...)
            lora, rest = placed_state(lora, mesh, dev), placed_state(rest, mesh, dev)
            s = lambda shape, dt: spec(shape, dt, mesh, dev)  # noqa: E731
            resident = per_device_bytes(lora) + per_device_bytes(opt_state(lora, mesh, dev))  # grad sum + AdamW
            return _grad_jit, (g, lora, rest, s((b, tp + tc), jnp.int32), s((b, tp + tc), bool), s((b, tc), bool),
                               s((b,), jnp.float32), None, None, s((b, tc), jnp.float32), s((), key.dtype)), \
                dict(prompt_len=tp, loss_cfg=loss_cfg, temperature=c.sampling.temperature, chunk=chunk), resident
        return build

    def opt_state(lora, mesh, dev):
        """AdamW state: mu, nu placed like the adapters (optax's zeros_like keeps their sharding), counts replicated."""
        like = jax.tree.structure(lora)
        return jax.tree.map(lambda x: lora if jax.tree.structure(x) == like else spec(x.shape, x.dtype, mesh, dev),
                            jax.eval_shape(optimizer.init, lora), is_leaf=lambda x: jax.tree.structure(x) == like)

    def apply_build(mesh, dev):
        _, lora, _ = nnx.split(policy_model(), nnx.LoRAParam, ...)
        lora = placed_state(lora, mesh, dev)
        return _apply_jit, (optimizer, lora, opt_state(lora, mesh, dev), lora, spec((), jnp.float32, mesh, dev)), {}, 0

    def sample_build(mesh, dev):  # the trainer samples from the LoRA policy (adapters unmerged)
        g, state = nnx.split(policy_model(**base_runtime))
        s = lambda shape, dt: spec(shape, dt, mesh, dev)  # noqa: E731
        sm = c.sampling
        keys = (sz.prompts,)  # one PRNG key per prompt
        f32 = s((), jnp.float32)  # temperature, top_p, min_p
        return _sample_jit, (g, placed_state(state, mesh, dev), s((sz.prompts, tp), jnp.int32),
                             s((sz.prompts, tp), bool), s(keys, key.dtype), f32, f32, f32), \
            dict(max_new_tokens=tc, num_samples=sz.group, top_k=int(sm.top_k), use_top_p=sm.top_p < 1.0,
                 greedy=sm.temperature == 0, eos_ids=cfg.eos_token_ids, pad_id=PAD_ID), 0

    def judge_build(mesh, dev):  # the judge scores with the base model (no adapters)
        g, state = nnx.split(base)
        return forward.tree_score_jit, (g, placed_state(state, mesh, dev),
                                        *(spec(a.shape, a.dtype, mesh, dev) for a in judge_args)), {}, 0

    for remat in args.remat:
        for attn in args.attention:
            if "grad" in args.programs:
                jobs.append(("train/grad", remat, attn, grad_job(remat, attn)))
    for name, build in (("apply", apply_build), ("sample", sample_build), ("judge", judge_build)):
        if name in args.programs:
            jobs.append(("train/apply" if name == "apply" else name, "-",
                         "-" if name == "apply" else base_runtime["attention"], build))

    rows, total = [], len(jobs) * len(args.devices)
    unit, uname = units(cfg.name)
    for n in args.devices:
        devs = devices_for(n)
        mesh = make_mesh({"fsdp": n}, devs) if n > 1 else None
        platform = devs[0].platform
        label = "CPU-compile estimate" if platform == "cpu" else f"{platform} compile"
        for program, remat, attn, build in jobs:
            row = dict(program=program, remat=remat, attention=attn, devices=n, mesh=f"fsdp:{n}" if mesh else "none",
                       backend=platform, label=label)
            print(f"[{len(rows) + 1}/{total}] {program} remat={remat} attention={attn} devices={n} ({label}) ...",
                  end=" ", flush=True)
            if attn == "cudnn" and platform != "gpu":
                row["status"] = "n/a (cudnn needs a GPU)"
            else:
                try:
                    fn, fargs, kwargs, resident = build(mesh, devs[0])
                    row.update(memory_row(fn, fargs, kwargs, mesh))
                    if program == "train/grad":
                        row["resident_bytes"] = resident
                        row["step_bytes"] = row["total_bytes"] + resident
                except Exception as e:  # noqa: BLE001 -- one failing program must not hide the others
                    row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(row["status"] if row["status"] != "ok" else f"{row['total_bytes'] / unit:.2f} {uname} total, "
                  f"compiled in {row['compile_s']:.1f}s", flush=True)
            rows.append(row)

    one = [r for r in rows if r["program"] == "train/grad" and r["devices"] == 1 and r["status"] == "ok"]
    fits = {}
    if one:
        best = min(one, key=lambda r: r["step_bytes"])
        fits["best"] = best
        # config.forward as the run resolves it: its candidates fastest first, the first that fits (rl.forward_plan)
        by = {(r["remat"], r["attention"]): r for r in one}
        order = [by[p] for p in forward_plan.candidates(fwd["remat"], fwd["attention"]) if p in by]
        default = [r for r in order if r["step_bytes"] <= TARGET_GIB * 2 ** 30] or order[-1:]
        if default:
            fits["default"] = default[0]
    return dict(model=cfg.name, config=dict(vars(args)), sizes=dataclasses.asdict(sz),
                lora=dataclasses.asdict(lora_cfg),
                forward_default=fwd, forward_inference=base_runtime, judge_shape=judge_shape, target_gib=TARGET_GIB, rows=rows,
                fits={k: dict(remat=r["remat"], attention=r["attention"], step_gib=r["step_bytes"] / 2**30,
                              fits=r["step_bytes"] <= TARGET_GIB * 2**30, label=r["label"]) for k, r in fits.items()},
                jax=jax.__version__, backend=jax.default_backend())


def units(model: str):
    return (2**20, "MiB") if model == "tiny" else (2**30, "GiB")


def print_table(res: dict) -> None:
    unit, uname = units(res["model"])
    sz = res["sizes"]
    print(f"\n{res['model']} bf16, LoRA r={res['lora']['rank']}, micro-batch {sz['micro_batch']} x ({sz['prompt']} + "
          f"{sz['completion']}) tokens; sample {sz['prompts']}x{sz['group']} rows; judge call {res['judge_shape']}")
    print(f"per-device {uname}; total = args + out + temp - alias; step = train/grad total + resident AdamW state and "
          f"gradient accumulator (train/apply is compiled separately)")
    head = (f"{'program':12s} {'remat':13s} {'attention':9s} {'dev':>3s} {'args':>9s} {'out':>9s} {'temp':>9s} "
            f"{'alias':>8s} {'total':>9s} {'step':>9s} {'comp s':>6s}  figures")
    print(head + "\n" + "-" * len(head))
    for r in res["rows"]:
        lead = f"{r['program']:12s} {r['remat']:13s} {r['attention']:9s} {r['devices']:3d}"
        if r["status"] != "ok":
            print(f"{lead} {r['status']}")
            continue
        v = [f"{r[k] / unit:9.3f}" for k in FIELDS]
        step = f"{r['step_bytes'] / unit:9.3f}" if "step_bytes" in r else f"{'':9s}"
        print(f"{lead} {v[0]} {v[1]} {v[2]} {v[3][1:]} {v[4]} {step} {r['compile_s']:6.1f}  {r['label']}")
    if any(r["backend"] == "cpu" for r in res["rows"]):
        print("CPU-compile estimates: XLA:CPU keeps f32 copies of the bf16 weights and f32 activations for its dots; "
              "a GPU compile needs less (run this script there for its figures)")
    for k, what in (("best", "best remat/attention"), ("default", "configs/rcrl.py config.forward")):
        f = res["fits"].get(k)
        if f:
            print(f"LoRA step on 1 device, {what} (remat={f['remat']}, attention={f['attention']}): "
                  f"{f['step_gib']:.1f} GiB -> {'fits' if f['fits'] else 'does NOT fit'} in {res['target_gib']} GiB "
                  f"({f['label']})")
    other = [f"{r['program']} {r['total_bytes'] / 2**30:.1f} GiB" for r in res["rows"]
             if r["devices"] == 1 and r["program"] in ("sample", "judge") and r["status"] == "ok"]
    if other:
        print(f"the step's other phases on 1 device: {', '.join(other)} (plus the resident AdamW state)")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-4b", choices=("qwen3-4b", "tiny"))
    ap.add_argument("--devices", default="1,8", help="device counts; N > 1 is a mesh fsdp:N")
    ap.add_argument("--remat", default="none,full,dots_saveable")
    ap.add_argument("--attention", default="plain,xla,chunked,cudnn", help="cudnn: compiled on GPU only")
    ap.add_argument("--programs", default="grad,apply,sample,judge")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench_out", "memory.json"))
    args = ap.parse_args(argv)
    for k in ("remat", "attention", "programs"):
        setattr(args, k, [x for x in getattr(args, k).split(",") if x])
    args.devices = [int(x) for x in args.devices.split(",")]
    t0 = time.perf_counter()
    res = run(args)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    print_table(res)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    print(f"wrote {args.json} ({res['wall_s']:.0f}s)")
    return res


if __name__ == "__main__":
    main()
