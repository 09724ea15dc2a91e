"""Defaults shared by every experiment config (configs/*.py build on `base_config`).

Defaults are the RcRL paper's (Table 6 of "Rubric Curriculum RL: Exploiting the Generation-Verification Gap
in Non-Verifiable Domains"; see docs/method.md): Qwen3-4B-sized LoRA r=32 alpha=32 dropout 0.05 on all
projections, lr 5e-6 cosine with 50 warmup steps, prompt <= 768 and completion <= 1024 tokens, top-p 0.8,
top-k 20, temperature 0.7, Dr. GRPO loss, 1300 steps, no KL, one criterion added every 100 steps.

The batch: Table 6 gives per-device batch 2, gradient accumulation 4, effective batch 8 and 8 rollouts. The
paper trains with TRL's GRPOTrainer, where those batch sizes count completions, so one optimizer step sees
8 completions = 1 prompt x G=8: `prompts_per_step=1`, `loss.micro_batch_size=2` (4 accumulated
micro-batches; accumulation is exact, rubric_jax.rl.policy). 1300 steps then pass about 6.5 times over the
200 training prompts. The other reading, 8 prompts x 8 rollouts per step, is
`--config.prompts_per_step=8 --config.loss.micro_batch_size=8`. Runs over several processes need
prompts_per_step to be a multiple of the process count (each process samples whole prompts).

The temperature: top-p 0.8 and top-k 20 are Qwen3's recommended non-thinking sampling settings, which pair
them with temperature 0.7; Table 6 does not list a temperature and TRL's default would be 1.0.
`tiny_overrides` shrinks any of them to a CPU smoke run on the embedded SmolLM2.
"""

from __future__ import annotations

from importlib import resources

import ml_collections
from ml_collections import config_dict

from rubric_jax.models.lora import ALL_TARGETS


def method_sections() -> dict[str, dict]:
    """Each registered reward method's own config sections with their defaults (`Method.config_sections`)."""
    from rubric_jax.rl import plugins  # noqa: PLC0415

    plugins.load_plugins()
    out: dict[str, dict] = {}
    for cls in plugins.METHODS.values():
        for name, fields in cls.config_sections().items():
            if name in out:
                raise ValueError(f"two reward methods declare the config section {name!r}")
            out[name] = fields
    return out


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.model = ""  # HF checkpoint dir / .gguf / embedded name; "" = the embedded SmolLM2 (logged)
    c.tokenizer = ""  # defaults to the model's
    c.dtype = "bfloat16"
    c.mesh = ""  # "" = one device; e.g. "fsdp:2,tensor:4" (axes data, fsdp, tensor; product = local devices)
    # How the model's forward runs (rubric_jax.models.config.ModelConfig): layer scan, rematerialisation in
    # the update ("none" | "full" | "dots_saveable" | "auto"), attention ("plain" | "xla" | "cudnn" | "chunked" |
    # "auto"). "auto": the run compiles its update at the largest micro-batch shape and keeps the fastest of
    # none+plain, none+chunked, full+chunked whose memory fits memory_fraction of the device
    # (rubric_jax.rl.forward_plan). Full remat + chunked attention is what lets the Qwen3-4B LoRA step
    # (micro-batch 8 x 1792 tokens) fit one 80 GiB device: ~37 GiB against ~570 GiB with neither
    # (benchmarks/memory.py, CPU-compile estimate); SmolLM2-135M on a CPU host needs no remat.
    c.forward = ml_collections.ConfigDict(dict(scan_layers=True, remat="auto", attention="auto",
                                               attention_chunk=512, memory_fraction=0.8))
    c.seed = 0
    c.steps = 1300
    c.prompts_per_step = 1  # Table 6 counts completions: 1 prompt x G=8 per optimizer step (module docstring)
    c.group_size = 8  # G
    c.max_prompt_len = 768
    c.max_completion_len = 1024
    # The prompt width of the whole run (rubric_jax.rl.shapes): "longest" = the ladder rung of the longest prompt
    # the run can draw; "max" = max_prompt_len for every dataset, so runs on different data with the same other
    # shapes compile the same sampler and update programs and share them through the compilation cache.
    c.prompt_width = "longest"
    c.rubric = "creative_writing"
    # Where each prompt's rubric comes from: "config" (c.rubric for all), "record" (the record's own rubric,
    # else c.rubric), "task" (the built-in rubric named by the record's task, else c.rubric).
    c.rubric_source = "config"
    # task: train on the records of these tasks only ("a,b"; "" = all), e.g. one video type of the script
    # set, as the RARE paper trains one run per production style
    # with_constraints: train only on records that carry constraints (RLMR)
    c.data = ml_collections.ConfigDict(dict(path="creative_writing", seed=0, task="", with_constraints=False))
    c.sampling = ml_collections.ConfigDict(dict(temperature=0.7, top_k=20, top_p=0.8, min_p=0.0))
    c.lora = ml_collections.ConfigDict(dict(rank=32, alpha=32.0, dropout=0.05, targets=tuple(ALL_TARGETS)))
    # What the update trains: "lora" (adapters on the frozen base; the KL reference is the base) or "full"
    # (every weight; the reference and the judge are a frozen copy of the starting weights, and checkpoints
    # hold the full parameters). RARE's paper trains full parameters.
    c.finetune = "lora"
    c.optim = ml_collections.ConfigDict(dict(lr=5e-6, warmup_steps=50, schedule="cosine", weight_decay=0.0,
                                             max_grad_norm=1.0))
    c.loss = ml_collections.ConfigDict(dict(
        advantage="dr_grpo",  # grpo | dr_grpo | rloo
        aggregation="dr_grpo",  # token_mean | seq_mean | dr_grpo
        eps_low=0.2, eps_high=0.2, dual_clip=0.0,  # 0 disables the dual clip
        kl_coef=0.0, kl_kind="k3",
        # importance: token | sequence (GSPO; clip it far tighter, e.g. eps_low=3e-4, eps_high=4e-4)
        # objective: clip (PPO) | cispo (the clipped ratio as a gradient-stopped weight; rubric_jax.rl.losses)
        # mask_truncated: completions cut at max_completion_len take no part in the loss (DAPO)
        importance="token", objective="clip", mask_truncated=False,
        num_iterations=1, micro_batch_size=2, max_bad_steps=5))  # 8 completions = 4 x 2
    # mode: sign (default: discrete verdicts from the order-averaged preference) | logit | hard | generate
    # model: "" = self-judging, the papers' setting (the policy's frozen base and tokenizer, no second copy); else
    # a checkpoint (dir / .gguf / embedded name) loaded frozen beside the policy, with its own tokenizer, for every
    # judge of the run (the reward judge, the pacing judge, RARE's scorer, RLMR's verifier; docs/method.md)
    # dtype: that model's weights ("" = config.dtype)
    # program_agreement: where a criterion or constraint the judge decides is also an IFEval instruction a program
    # checks, log how often the judge agrees with the program (judge/program_agreement[/<id>]); the program's
    # verdicts are computed for the log only and never reach the reward
    # questions: better (default) | worse | both: which pairwise question(s) the judge answers; "both" pools the
    # two readings, the worse one weighted by worse_weight (JudgeConfig.questions; docs/judge.md, "A judge apart")
    # comparison: pairwise (pairs of a group's responses, scheduled by `pairing`: all | circular | swiss) |
    # listwise (the whole group in one judge sequence per presentation; rubric_jax.judge.listwise)
    c.judge = ml_collections.ConfigDict(dict(mode="sign", comparison="pairwise", pairing="all",
                                             max_response_tokens=1024, model="", dtype="", questions="better",
                                             worse_weight=3.0, program_agreement=True))
    # method: the reward method (rubric_jax.methods): pairwise | absolute (RcRL and the Table 3 baselines, on the
    # config's rubric or each prompt's) | rare | rlmr | any other registered name.
    # judging: the old name of `method`, still read for one release (rubric_jax.config_checks.apply_renames).
    c.reward = ml_collections.ConfigDict(dict(
        method="pairwise", judging=config_dict.placeholder(str), curriculum=True, interval=100, weighting="emphasis",
        alpha=0.5, order="paper",
        order_seed=0, dropout_q=0.0, exploration_coef=0.0, exploration_dim=64, exploration_lambda=1.0,
        usefulness_coef=0.0, verifier_flip=0.0,
        # normalise: sum | per_criterion (each criterion standardised within its group before the weighted sum)
        # overlong_penalty: DAPO's soft penalty, times this (0: off), over the last overlong_buffer tokens before
        # max_completion_len; length_control: subtract this times the within-group standardised log length
        normalise="sum", overlong_penalty=0.0, overlong_buffer=64, length_control=0.0,
        pacing="fixed"))  # fixed: one criterion every `interval` steps | auto: when held-out quality plateaus |
    # monitor: the fixed schedule, with auto's held-out readings logged (to compare the two)
    # Each reward method adds its own sections with their defaults (`Method.config_sections`: RcRL's pacing,
    # RLMR's rlmr, RARE's rare), so a method's settings live beside its code (rubric_jax.methods).
    for name, fields in method_sections().items():
        c[name] = ml_collections.ConfigDict(fields)
    # DAPO dynamic sampling (rubric_jax/rl/dynamic.py), any method: drop groups without reward spread, refill.
    c.dynamic = ml_collections.ConfigDict(dict(enabled=False, oversample=1, max_rounds=2, min_spread=1e-6))
    c.checkpoint = ml_collections.ConfigDict(dict(every=50, keep=3))
    c.tensorboard = True
    c.profile_steps = -1  # a step index (or "3,5") to trace with jax.profiler into workdir/profile
    c.compilation_cache_dir = ""  # persistent XLA cache: "" = <workdir>/jax_cache, "none" = off, else a path
    c.profile_python = False  # also trace Python calls in profiled steps (floods the trace; off = device work only)
    return c


def tiny_overrides(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A CPU smoke run: embedded SmolLM2 in f32, 2 prompts x G=2, short completions, 2 steps."""
    c.model = "smollm2-135m-instruct"
    c.dtype = "float32"
    c.steps = 2
    c.prompts_per_step = 2
    c.group_size = 2
    c.max_prompt_len = 128
    c.max_completion_len = 16
    c.lora.rank = 4
    c.lora.alpha = 8.0
    c.optim.lr = 1e-4
    c.optim.warmup_steps = 0
    c.loss.micro_batch_size = 4
    c.forward.remat = "none"  # 16-token completions: nothing to save, and recomputation costs CPU time
    c.forward.attention = "plain"
    c.judge.max_response_tokens = 32
    c.reward.interval = 1
    c.checkpoint.every = 1
    from rubric_jax.rl import plugins  # noqa: PLC0415

    for cls in plugins.METHODS.values():  # each method's own sections (RcRL: 2 held-out pacing prompts)
        cls.tiny_sections(c)
    return c


def ifeval_learning(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Everything but the reward's source of configs/learn_ifeval.py and its judged twins (learn_ifeval_judged,
    _pairwise, _selfjudged): prompts, G, steps, lengths, sampling, LoRA, optimizer, loss, dynamic sampling and
    seed, so the four runs differ in who gives the verdict alone. Each choice is explained in
    configs/learn_ifeval.py."""
    c.model = "smollm2-135m-instruct"
    c.dtype = "float32"
    c.data.path = str(resources.files("rubric_jax.data") / "ifeval_train.jsonl")
    c.data.with_constraints = True
    c.seed = 0
    c.steps = 12
    c.prompts_per_step = 2
    c.group_size = 8
    c.max_prompt_len = 104  # the longest training prompt is 98 tokens with SmolLM2's chat template
    c.max_completion_len = 160
    c.sampling.temperature = 1.0
    c.lora.rank, c.lora.alpha, c.lora.dropout = 16, 32.0, 0.0
    c.optim.lr, c.optim.warmup_steps, c.optim.schedule = 2e-4, 2, "constant"
    c.loss.advantage = "grpo"
    c.loss.aggregation = "token_mean"
    # 4 micro-batches of 4: without rematerialisation a 264-token sequence holds ~0.8 GiB of activations
    c.loss.micro_batch_size = 4
    c.dynamic.enabled = True
    c.dynamic.max_rounds = 1
    # short sequences on a CPU: recomputation would cost time and save memory that is not needed
    c.forward.remat = "none"
    c.forward.attention = "plain"
    c.checkpoint.every = 4
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    return c


def ifeval_verified(c: ml_collections.ConfigDict, verifier: str) -> ml_collections.ConfigDict:
    """The reward of the IFEval learning configs that read one verdict per instruction: RLMR's verifier alone
    (linear mix a = 0, b = 1, no writing reward), the share of the prompt's instructions kept (rlmr.credit =
    "share", chosen on a held-out split of the training prompts over the all-or-nothing pass: configs/learn_ifeval.py).
    verifier: "program" (IFEval's checkers) or "llm" (the run's judge reads each instruction's sentence)."""
    from rubric_jax.methods.rlmr import rlmr_overrides  # noqa: PLC0415

    c = rlmr_overrides(c, mix="linear", a=0.0, b=1.0)
    c.rlmr.writing = "none"  # the verifier is the whole reward
    c.rlmr.credit = "share"
    c.rlmr.verifier = verifier
    return c


def ifeval_tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """:tiny of the IFEval learning configs: tiny_overrides' 2 prompts x G = 2 for 2 steps, with room for a few
    words of an answer; the policy's own base judges (the 1.5B judge is an optional install)."""
    c.max_completion_len = 24
    c.judge.model = ""
    return c


def finalize(c: ml_collections.ConfigDict, variant: str | None = None, tiny=None) -> ml_collections.ConfigDict:
    """Applies the variant (":tiny" after the config path; `tiny`: a method's own additions to it) and locks
    the config, so that a misspelt override (--config.stpes=5) is an error rather than a silent no-op."""
    if variant == "tiny":
        tiny_overrides(c)
        if tiny is not None:
            tiny(c)
    elif variant:
        raise ValueError(f"unknown config variant {variant!r} (expected none or one of {VARIANTS})")
    c.lock()
    return c
