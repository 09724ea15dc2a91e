"""GPU check: decode, judge, one LoRA step and compiled memory of a Qwen3-4B-shaped model, in one bounded run.

    bash benchmarks/gpu_check.sh /tmp/gpu_check.json                  # one H200: nvidia-smi, then this, <= 8 min
    python benchmarks/gpu_check.py --shapes=tiny --out=/tmp/gc.json    # CPU, tiny shapes: 54 s on 2 busy cores

Random weights built on the device in the target dtype (Qwen3-4B's shapes by default on an accelerator, a
two-layer Qwen3 with the real vocabulary on CPU): nothing is downloaded. The legs, in order, each a table row
on stdout and an entry of the JSON (`legs.<name>`, with its settings):

  decode  tokens/s of the trainer's sampler (prefill once, G rows per prompt decoded against it, greedy, no stop
          id) at batch 64 and 256 rows, 128 prompt + 128 new tokens; the fraction of the bandwidth bound: bytes a
          decode step reads (every weight once + the KV cache as allocated, since the static-shape attention
          reads every slot) x steps/s over the device's measured copy bandwidth (benchmarks/sampler.py).
  judge   verdicts/s of the prefix-shared pairwise logit judge (rubric_jax.judge.Judge, as the trainer builds
          it: sign mode, all pairs in both orders) at the paper's G=8: 56 verdicts per group and criterion.
  train   one GRPO update of the LoRA adapters (rubric_jax.rl.policy.Policy, the trainer's forward settings:
          full remat, chunked attention) on 8 prompts x G=8 synthetic rollouts: seconds per step after a
          warm-up step, model FLOP/s and MFU against a stated peak (H100/H200 bf16 dense 989 TFLOP/s; else the
          square matmul peak this run measures).
  memory  XLA's memory analysis of the programs the legs above ran (update/grad, update/apply, decode per
          batch), got by lowering their recorded arguments again (a jit cache hit, no second compilation),
          and the device's peak bytes in use (null on CPU, which does not report it).

The run keeps to --budget_s (from the start of this script): a leg that would start after it is recorded as
skipped with the reason, and loops inside a leg stop early once it is spent. The JSON is rewritten after every
leg ("complete": false until the end), and a SIGTERM (the .sh's timeout) records the leg it interrupted, so a
cut-short run is never mistaken for a whole one. Exit status: 1 when a leg failed, 124 when interrupted, else 0.

No figures from a GPU exist yet: the first H200 run of this script will be the first.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import signal
import sys
import time
import traceback
from unittest import mock

T_START = time.perf_counter()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks import judge as bench_judge  # noqa: E402
from benchmarks import memory as bench_memory  # noqa: E402
from benchmarks import sampler as bench_sampler  # noqa: E402
from rubric_jax import PRESETS, init_model, load_tokenizer  # noqa: E402
from rubric_jax.config_base import base_config  # noqa: E402
from rubric_jax.judge import Judge, JudgeConfig  # noqa: E402
from rubric_jax.models.config import ModelConfig  # noqa: E402
from rubric_jax.models.lora import LoRAConfig, apply_lora  # noqa: E402
from rubric_jax.rl import policy as policy_mod  # noqa: E402
from rubric_jax.rl.losses import LossConfig  # noqa: E402
from rubric_jax.rubrics import load_rubric  # noqa: E402
from rubric_jax.sampling import sampler as sampler_mod  # noqa: E402

GROUP = 8  # the paper's G: rollouts per prompt, responses per judged group
LEGS = ("decode", "judge", "train", "memory")
# (device_kind substring, bf16 dense FLOP/s, HBM bytes/s), first match wins: vendor datasheet figures.
DEVICE_PEAKS = (("H100 PCIe", 756e12, 2.0e12), ("H100", 989e12, 3.35e12), ("H200", 989e12, 4.8e12),
                ("A100", 312e12, 2.0e12))


@dataclasses.dataclass(frozen=True)
class Plan:
    model: ModelConfig
    copy_bytes: int  # buffer of the copy-bandwidth measurement
    matmul_n: int  # square matmul of the measured FLOP/s peak
    decode_batches: tuple[int, ...]  # decoded rows
    decode_group: int  # rows per prompt
    decode_prompt: int
    decode_new: int
    decode_reps: int
    judge_groups: int
    judge_criteria: int
    judge_prompt: int
    judge_response: int
    judge_reps: int
    train_prompts: int  # x GROUP rollouts
    train_prompt: int
    train_completion: int
    micro_batch: int
    train_steps: int  # timed, after one warm-up step
    attention_chunk: int  # train T is a multiple of it: no padded query block


PLANS = {
    "qwen3-4b": Plan(PRESETS["qwen3-4b"], copy_bytes=1 << 30, matmul_n=8192, decode_batches=(64, 256),
                     decode_group=GROUP, decode_prompt=128, decode_new=128, decode_reps=3, judge_groups=4,
                     judge_criteria=4, judge_prompt=128, judge_response=256, judge_reps=3, train_prompts=8,
                     train_prompt=256, train_completion=256, micro_batch=32, train_steps=3, attention_chunk=512),
    # Tiny dims but the real vocabulary: the judge reads its verdict tokens' ids from the Qwen3 tokenizer.
    "tiny": Plan(PRESETS["tiny"], copy_bytes=1 << 28, matmul_n=1024, decode_batches=(2, 4), decode_group=2,
                 decode_prompt=16, decode_new=16, decode_reps=2, judge_groups=1, judge_criteria=2, judge_prompt=16,
                 judge_response=16, judge_reps=1, train_prompts=1, train_prompt=16, train_completion=16,
                 micro_batch=4, train_steps=2, attention_chunk=16),
}


def log(msg: str) -> None:
    print(f"[gpu_check {time.perf_counter() - T_START:6.1f}s] {msg}", file=sys.stderr, flush=True)


class Budget:
    def __init__(self, seconds: float):
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - T_START

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def reason(self) -> str:
        return f"time budget of {self.seconds:g} s spent ({self.elapsed():.1f} s elapsed)"


class Programs:
    """The last call of each watched jitted function, by name: lowering the same arguments again afterwards is a
    jit cache hit, which gives each program's compiled memory and cost without compiling it twice."""

    def __init__(self):
        self.calls = {}

    @contextlib.contextmanager
    def watch(self, module, attr: str, name: str):
        fn = getattr(module, attr)

        def spy(*args, **kwargs):
            self.calls[name] = (fn, args, kwargs)
            return fn(*args, **kwargs)

        with mock.patch.object(module, attr, spy):
            yield

    def compiled(self, name: str):
        fn, args, kwargs = self.calls[name]
        return fn.lower(*args, **kwargs).compile()


@dataclasses.dataclass
class Ctx:
    plan: Plan
    dtype: jnp.dtype
    base: nnx.Module  # the frozen model (judge)
    policy_model: nnx.Module  # the same arrays with LoRA adapters (sampler, update)
    budget: Budget
    programs: Programs
    peaks: tuple | None  # (FLOP/s, HBM bytes/s) of this device from DEVICE_PEAKS, or None


def weight_bytes(model) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def kv_bytes_per_token(cfg: ModelConfig, dtype) -> int:
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * jnp.dtype(dtype).itemsize


def matmul_peak(n: int, dtype, reps: int = 5) -> float:
    """FLOP/s of the best of `reps` (n, n) @ (n, n) products: what this device reaches on a plain dense matmul."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def update_flops(cfg: ModelConfig, n_lora: int, rows: int, t: int, tc: int) -> int:
    """Model FLOPs of one LoRA update step, forward + backward, the remat recomputation left out (as MFU counts).

    The base weights are frozen, so the backward computes activation gradients only: 2 FLOPs per weight and
    token, not the 4 of full fine-tuning (no weight gradient); the adapters get both (6 in all). The log-prob head
    runs on the completion positions only; attention counts whole T x T score blocks, whose backward needs
    both operands' gradients. On an unrolled model without remat this is within 4% of XLA's own count."""
    d, hn, kh = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = 2 * d * hn + 2 * d * kh + 3 * d * cfg.intermediate_size  # q, o; k, v; gate, up, down
    tokens = rows * t
    matmul = tokens * per_layer * cfg.num_layers + rows * tc * d * cfg.vocab_size
    attention = 4 * rows * t * t * hn * cfg.num_layers
    return 4 * matmul + 3 * attention + 6 * tokens * n_lora


# ---------------------------------------------------------------------------------------------------------------
# Legs: each fills its `leg` dict; raising marks it failed


def leg_decode(ctx: Ctx, leg: dict) -> None:
    p, cfg = ctx.plan, ctx.base.cfg
    leg["settings"] = dict(batches=list(p.decode_batches), rows_per_prompt=p.decode_group,
                           prompt_tokens=p.decode_prompt, new_tokens=p.decode_new, sampling="greedy, no stop id",
                           reps=p.decode_reps,
                           kv_counted="as allocated: prompt prefix + every row's new-token slots, each step")
    log("decode: measuring copy bandwidth")
    bw = bench_sampler.copy_bandwidth(p.copy_bytes)
    wb = weight_bytes(ctx.policy_model)
    leg.update(copy_bandwidth_GBs=bw / 1e9, weight_bytes=wb, rows=[])
    for batch in p.decode_batches:
        if ctx.budget.left() <= 0:
            leg["rows"].append(dict(batch=batch, status="skipped", reason=ctx.budget.reason()))
            continue
        prompts = bench_sampler.make_prompts(None, batch // p.decode_group, p.decode_prompt, cfg.vocab_size)
        log(f"decode: batch {batch} ({len(prompts)} prompts x {p.decode_group}), compiling and timing")
        with ctx.programs.watch(sampler_mod, "_sample_jit", f"decode/batch{batch}"):
            t_pre, t_all, out = bench_sampler.time_ours(ctx.policy_model, prompts, p.decode_new, 0, p.decode_reps,
                                                        num_samples=p.decode_group)
        step_s = (t_all - t_pre) / p.decode_new
        prompt_len = out.prompt_tokens.shape[1]
        kv = kv_bytes_per_token(cfg, ctx.dtype) * (len(prompts) * prompt_len + batch * p.decode_new)
        read = (wb + kv) / step_s
        row = dict(batch=batch, prompts=len(prompts), status="ok", prefill_s=t_pre, decode_s=t_all - t_pre,
                   step_ms=1e3 * step_s, tok_s=batch / step_s, kv_bytes_per_step=kv, bytes_per_step=wb + kv,
                   read_GBs=read / 1e9, bandwidth_fraction=read / bw)
        if ctx.peaks:
            row["fraction_of_spec_hbm"] = read / ctx.peaks[1]
        leg["rows"].append(row)
    if any(r["status"] != "ok" for r in leg["rows"]):
        leg.update(status="partial", reason=ctx.budget.reason() + " before every batch ran")


def leg_judge(ctx: Ctx, leg: dict) -> None:
    p, c = ctx.plan, base_config()
    tok = load_tokenizer("qwen3")
    crits = list(load_rubric(c.rubric))[: p.judge_criteria]
    prompts = [bench_judge.text_of_tokens(tok, p.judge_prompt, seed=1000 + q) for q in range(p.judge_groups)]
    responses = [[bench_judge.text_of_tokens(tok, p.judge_response, seed=100 * q + i) for i in range(GROUP)]
                 for q in range(p.judge_groups)]
    # The trainer's judge (rl/setup.py): config.judge's mode and pairing; no cache, so every pass is computed.
    judge = Judge(ctx.base, tok, JudgeConfig(mode=c.judge.mode, pairing=c.judge.pairing), cache_entries=0,
                  max_response_tokens=p.judge_response)
    verdicts = p.judge_groups * GROUP * (GROUP - 1) * len(crits)
    leg["settings"] = dict(groups=p.judge_groups, group_size=GROUP, criteria=len(crits), prompt_tokens=p.judge_prompt,
                           response_tokens=p.judge_response, mode=c.judge.mode, pairing=c.judge.pairing,
                           sharing=judge.config.sharing, tokens_per_call=judge.tokens_per_call, reps=p.judge_reps)
    log(f"judge: {verdicts} verdicts a pass, compiling then {p.judge_reps} timed pass(es)")
    secs, _ = bench_judge.timed(lambda: judge.pairwise_batch(prompts, responses, crits), p.judge_reps)
    passes = p.judge_reps + 1
    leg.update(verdicts=verdicts, seconds=secs, verdicts_per_s=verdicts / secs, compilations=judge.stats.compilations,
               padded_tokens_per_pass=judge.stats.padded_tokens // passes,
               real_tokens_per_pass=judge.stats.real_tokens // passes)


def leg_train(ctx: Ctx, leg: dict) -> None:
    p, cfg, c = ctx.plan, ctx.base.cfg, base_config()
    rows, tp, tc = p.train_prompts * GROUP, p.train_prompt, p.train_completion
    lc = c.loss
    policy = policy_mod.Policy(
        ctx.policy_model,
        policy_mod.make_optimizer(c.optim.lr, warmup_steps=0, total_steps=p.train_steps + 1,
                                  weight_decay=c.optim.weight_decay, max_grad_norm=c.optim.max_grad_norm,
                                  schedule="constant"),
        LossConfig(aggregation=lc.aggregation, eps_low=lc.eps_low, eps_high=lc.eps_high, dual_clip=lc.dual_clip or None,
                   kl_coef=lc.kl_coef, kl_kind=lc.kl_kind, max_completion_len=tc),
        policy_mod.PolicyConfig(micro_batch_size=p.micro_batch, temperature=c.sampling.temperature))
    rng = np.random.default_rng(0)
    batch = policy_mod.RolloutBatch(
        tokens_bt=rng.integers(0, cfg.vocab_size, (rows, tp + tc), dtype=np.int32),
        mask_bt=np.ones((rows, tp + tc), bool), prompt_len=tp, completion_mask_bt=np.ones((rows, tc), bool),
        adv_b=rng.standard_normal(rows).astype(np.float32))
    n_lora = sum(x.size for x in jax.tree.leaves(policy.trainable))
    leg["settings"] = dict(prompts=p.train_prompts, group_size=GROUP, rows=rows, prompt_tokens=tp,
                           completion_tokens=tc, micro_batch=p.micro_batch, lora_rank=c.lora.rank,
                           lora_targets=list(c.lora.targets), lora_params=n_lora, remat=cfg.remat,
                           attention=cfg.attention, loss=lc.aggregation, timed_steps=p.train_steps)
    log("train: measuring the matmul peak")
    measured = matmul_peak(p.matmul_n, ctx.dtype)
    times, metrics = [], {}
    with ctx.programs.watch(policy_mod, "_grad_jit", "update/grad"), \
            ctx.programs.watch(policy_mod, "_apply_jit", "update/apply"):
        for step in range(p.train_steps + 1):  # step 0 compiles
            if step > 1 and ctx.budget.left() <= 0:
                break
            log(f"train: step {step}" + (" (compiles)" if step == 0 else ""))
            t = time.perf_counter()
            metrics = policy.update(batch, jax.random.key(step))
            if step:
                times.append(time.perf_counter() - t)
    flops = update_flops(cfg, n_lora, rows, tp + tc, tc)
    step_s = min(times)
    peak, source = ((ctx.peaks[0], f"{jax.devices()[0].device_kind} bf16 dense (datasheet)")
                    if ctx.peaks and ctx.dtype == jnp.bfloat16 else (measured, f"measured {p.matmul_n}^3 matmul"))
    ca = ctx.programs.compiled("update/grad").cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    xla = (ca or {}).get("flops")
    leg.update(step_s=step_s, step_s_mean=float(np.mean(times)), steps_timed=len(times),
               tokens_per_step=rows * (tp + tc), loss=metrics.get("loss"), model_flops_per_step=flops,
               flops_source="analytic (update_flops: frozen-base backward = activation gradients only, no remat)",
               xla_cost_analysis_flops=None if xla is None else float(xla) * -(-rows // p.micro_batch),
               xla_note="XLA's count of the grad program x micro-batches: remat and elementwise work included, "
                        "a lax.scan body counted once (so scanned layers count as one); not used for MFU",
               model_tflops_s=flops / step_s / 1e12, peak_tflops_s=peak / 1e12, peak_source=source,
               mfu=flops / step_s / peak, measured_matmul_tflops_s=measured / 1e12)
    if len(times) < p.train_steps:
        leg.update(status="partial", reason=f"{ctx.budget.reason()} after {len(times)} of {p.train_steps} timed steps")


def leg_memory(ctx: Ctx, leg: dict) -> None:
    leg["programs"] = {}
    for name in sorted(ctx.programs.calls):
        fn, args, kwargs = ctx.programs.calls[name]
        log(f"memory: {name}")
        leg["programs"][name] = bench_memory.memory_row(fn, args, kwargs, None)
    stats = jax.devices()[0].memory_stats()
    leg.update(device_peak_bytes_in_use=stats.get("peak_bytes_in_use") if stats else None,
               device_bytes_limit=stats.get("bytes_limit") if stats else None)
    if not leg["programs"]:
        leg.update(status="skipped", reason="no program to analyse: the decode and train legs did not run")


LEG_FNS = dict(decode=leg_decode, judge=leg_judge, train=leg_train, memory=leg_memory)


# ---------------------------------------------------------------------------------------------------------------
# Report


def table_rows(res: dict) -> list[tuple[str, str, str]]:
    unit, uname = bench_memory.units(res["shapes"])  # MiB for tiny shapes, else GiB
    size = lambda n: "n/a" if n is None else f"{n / unit:.3f} {uname}"  # noqa: E731
    out = []
    for name in LEGS:
        leg = res["legs"][name]
        if leg["status"] not in ("ok", "partial"):
            out.append((name, leg["status"], leg.get("reason", "")))
            continue
        s = leg["settings"] if "settings" in leg else {}
        if name == "decode":
            for r in leg["rows"]:
                what = f"batch {r['batch']} ({s['prompt_tokens']}+{s['new_tokens']} tok)"
                out.append((name, what, f"skipped: {r.get('reason')}" if r["status"] != "ok" else
                            f"{r['tok_s']:.1f} tok/s, {r['step_ms']:.2f} ms/step, "
                            f"{r['bytes_per_step'] / 1e9:.3f} GB/step"
                            f" -> {100 * r['bandwidth_fraction']:.1f}% of {leg['copy_bandwidth_GBs']:.1f} GB/s copy"))
        elif name == "judge":
            what = f"{s['groups']} x G={s['group_size']} x {s['criteria']} crit = {leg['verdicts']} verdicts"
            out.append((name, what, f"{leg['verdicts_per_s']:.1f} verdicts/s ({leg['seconds']:.3f} s/pass)"))
        elif name == "train":
            what = f"{s['rows']} rows x ({s['prompt_tokens']}+{s['completion_tokens']}) tok, mb {s['micro_batch']}"
            out.append((name, what,
                        f"{leg['step_s']:.3f} s/step, {leg['model_tflops_s']:.3g} TFLOP/s, MFU {100 * leg['mfu']:.1f}% "
                        f"of {leg['peak_tflops_s']:.4g} ({leg['peak_source']})"))
        else:
            for prog, r in leg.get("programs", {}).items():
                out.append((name, prog, f"args {size(r['argument_bytes'])}, out {size(r['output_bytes'])}, "
                                        f"temp {size(r['temp_bytes'])}, total {size(r['total_bytes'])}"))
            out.append((name, "device peak bytes in use", size(leg["device_peak_bytes_in_use"])))
        if leg["status"] == "partial":
            out.append((name, "partial", leg["reason"]))
    return out


def print_table(res: dict) -> None:
    m = res["model"]
    print(f"\nGPU check: {res['shapes']} shapes ({m['params'] / 1e9:.3f}B params, random weights), {res['dtype']} on "
          f"{res['device']['kind']} ({res['device']['platform']}), jax {res['jax']}; {res['wall_s']:.1f} s of a "
          f"{res['budget_s']:g} s budget")
    rows = table_rows(res)
    w = [max(len(r[i]) for r in rows + [("leg", "setting", "")]) for i in range(2)]
    print(f"{'leg':{w[0]}s}  {'setting':{w[1]}s}  result")
    for leg, what, result in rows:
        print(f"{leg:{w[0]}s}  {what:{w[1]}s}  {result}")


# ---------------------------------------------------------------------------------------------------------------
# Driver


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build(plan: Plan, dtype) -> tuple:
    """(frozen base, LoRA policy over the same arrays), set up as rl/setup.py does with config.forward."""
    c = base_config()
    # "auto" (the run compiles its update to choose) is fixed here at the lean 4B setting: the check's budget
    # has no room for the extra compilations
    lean = dict(remat="full", attention="chunked")
    fwd = {k: (lean[k] if c.forward[k] == "auto" else c.forward[k]) for k in ("scan_layers", "remat", "attention")}
    fwd["attention_chunk"] = plan.attention_chunk
    base = init_model(plan.model.replace(**fwd), dtype=dtype, seed=0)
    policy_model = nnx.merge(*nnx.split(base))
    lora = LoRAConfig(rank=c.lora.rank, alpha=c.lora.alpha, dropout=c.lora.dropout, targets=tuple(c.lora.targets))
    return base, apply_lora(policy_model, lora, seed=c.seed)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    on_cpu = jax.default_backend() == "cpu"
    ap.add_argument("--shapes", choices=sorted(PLANS), default="tiny" if on_cpu else "qwen3-4b")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="float32" if on_cpu else "bfloat16")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench_out", "gpu_check.json"))
    ap.add_argument("--budget_s", type=float, default=420.0, help="seconds from the script's start")
    ap.add_argument("--legs", default=",".join(LEGS), help="comma list of legs to run (the others: skipped)")
    ap.add_argument("--decode_batches", default="", help="comma list of decoded rows (default: the shapes')")
    ap.add_argument("--judge_groups", type=int, default=0)
    ap.add_argument("--judge_criteria", type=int, default=0)
    ap.add_argument("--train_prompts", type=int, default=0, help="prompts of the update, each x G=8 rollouts")
    ap.add_argument("--micro_batch", type=int, default=0)
    args = ap.parse_args(argv)
    over = {k: getattr(args, k) for k in ("judge_groups", "judge_criteria", "train_prompts", "micro_batch")
            if getattr(args, k)}
    if args.decode_batches:
        over["decode_batches"] = tuple(int(x) for x in args.decode_batches.split(","))
    plan = dataclasses.replace(PLANS[args.shapes], **over)
    unknown = set(filter(None, args.legs.split(","))) - set(LEGS)
    if unknown:
        ap.error(f"--legs: unknown {sorted(unknown)}; choose from {LEGS}")
    bad = [b for b in plan.decode_batches if b % plan.decode_group]
    if bad:
        ap.error(f"--decode_batches {bad}: each must be a multiple of {plan.decode_group} rows per prompt")
    return args, plan


def main(argv=None) -> int:
    args, plan = parse_args(argv)
    dtype = jnp.dtype(args.dtype)
    dev = jax.devices()[0]
    peaks = next(((f, b) for key, f, b in DEVICE_PEAKS if key in dev.device_kind), None)
    selected = [x for x in args.legs.split(",") if x]
    res = dict(tool="benchmarks/gpu_check.py", complete=False, shapes=args.shapes, dtype=args.dtype,
               jax=jax.__version__, jaxlib=package_version("jaxlib"), budget_s=args.budget_s,
               device=dict(platform=dev.platform, kind=dev.device_kind, count=jax.device_count()),
               model={}, plan=dataclasses.asdict(plan),
               legs={name: dict(status="pending") for name in LEGS}, wall_s=None)
    del res["plan"]["model"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def write():
        res["wall_s"] = round(time.perf_counter() - T_START, 2)
        with open(args.out + ".tmp", "w") as f:
            json.dump(res, f, indent=2, default=str)
        os.replace(args.out + ".tmp", args.out)  # a reader never sees half a file

    def on_term(signum, frame):
        for leg in res["legs"].values():
            if leg["status"] in ("running", "pending"):
                when = "during" if leg["status"] == "running" else "before"
                leg.update(status="interrupted", reason=f"signal {signum} (the .sh's timeout?) {when} this leg")
        write()
        log(f"interrupted by signal {signum}; wrote {args.out}")
        os._exit(124)

    signal.signal(signal.SIGTERM, on_term)
    budget = Budget(args.budget_s)
    log(f"{args.shapes} shapes, {args.dtype}, on {dev.device_kind}: building random weights")
    base, policy_model = build(plan, dtype)
    res["model"] = dataclasses.asdict(base.cfg)  # with the forward settings the legs ran
    res["model"]["params"] = sum(x.size for x in jax.tree.leaves(nnx.state(base, nnx.Param)))
    res["model"]["weight_bytes"] = weight_bytes(base)
    ctx = Ctx(plan, dtype, base, policy_model, budget, Programs(), peaks)
    write()
    failed = False
    for name in LEGS:
        leg = res["legs"][name]
        if name not in selected:
            leg.update(status="skipped", reason="not selected (--legs)")
            continue
        if budget.left() <= 0:
            leg.update(status="skipped", reason=budget.reason() + " before this leg")
            continue
        leg["status"] = "running"
        t0 = time.perf_counter()
        try:
            LEG_FNS[name](ctx, leg)
            if leg["status"] == "running":
                leg["status"] = "ok"
        except Exception as e:  # noqa: BLE001 -- one failing leg (an OOM, say) must not hide the others
            traceback.print_exc()
            leg.update(status="error", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            failed = True
        leg["wall_s"] = round(time.perf_counter() - t0, 2)
        log(f"{name}: {leg['status']} in {leg['wall_s']:.1f}s")
        write()
    res["complete"] = True
    write()
    print_table(res)
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
