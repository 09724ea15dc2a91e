"""What a training run holds besides its step counter, and how `build` makes it from a config.

`build(config)` loads the model and tokenizer, wraps the policy with LoRA (or trains every weight), makes the
optimizer, the judge (on the policy's frozen base, or on `config.judge.model` loaded beside it: `load_judge`),
the data iterator, the run's shape plan, the reward method (found by name through rubric_jax.rl.plugins: made
and given the records before the model loads, built once it has) and the reward terms. Everything that can be rejected from the config alone
is checked before the model loads (`rubric_jax.rl.preflight`, which asks the method to check its own section).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from rubric_jax.data import PromptDataset, load_jsonl
from rubric_jax.judge import Judge
from rubric_jax.judge.common import model_fingerprint
from rubric_jax.models.loading import DEFAULT_MODEL, load_model, resolve_checkpoint
from rubric_jax.models.lora import apply_lora
from rubric_jax.models.sharding import make_mesh, shard_model
from rubric_jax.models.tokenizer import load_tokenizer
from rubric_jax.rl import dynamic, forward_plan, plugins, preflight
from rubric_jax.rl.hosts import Hosts
from rubric_jax.rl.policy import Policy, PolicyConfig, make_optimizer
from rubric_jax.rl.shapes import ShapePlan
from rubric_jax.rubrics import load_rubric

log = logging.getLogger(__name__)



@dataclasses.dataclass
class Setup:
    """Everything a run holds besides its step counter."""

    config: Any
    tokenizer: Any
    base: Any  # frozen base model (reference; the judge's too unless config.judge.model is set)
    policy: Policy
    judge: Judge | None  # the method's judge over judge_model (None unless the method asks for one)
    criteria: list
    reward_cfg: Any  # config.reward as the method reads it (`Method.reward_section`)
    dataset: PromptDataset
    data_iter: Any
    hosts: Hosts
    base_local: Any  # the frozen base on this process' devices (the judge's and the bonuses' model)
    shapes: ShapePlan | None = None  # None: the sampler's own bucketing and untrimmed completions
    # the reward method and the reward terms added to its rewards (rubric_jax.rl.plugins finds both by name)
    method: plugins.Method | None = None
    terms: list = dataclasses.field(default_factory=list)
    dynamic: dynamic.DynamicConfig = dynamic.DynamicConfig()
    # policy_entropy of the run's first steps (diagnostics.record_entropy): the base of policy_entropy_ratio,
    # kept in the checkpoint's meta so a resumed run keeps the same base
    entropy_head: list = dataclasses.field(default_factory=list)
    # What every judge of the run reads (`load_judge`): base_local and the policy's tokenizer when self-judging,
    # else config.judge.model and its own tokenizer (frozen: no adapters, no optimizer state, never trained).
    judge_model: Any = None
    judge_tokenizer: Any = None
    # how the update's forward was chosen when config.forward left it to the run (rl.forward_plan), else None
    forward_plan: forward_plan.ForwardPlan | None = None
    judge_id: str = ""  # the judge model's fingerprint (the checkpoint's record of who rewarded the steps)

    @property
    def judge_apart(self) -> bool:
        """Whether the judges read a model other than the policy's base (config.judge.model)."""
        return self.judge_model is not None and self.judge_model is not self.base_local

    def local_policy(self) -> Policy:
        """The current policy on this process' devices (sampling, usefulness bonus)."""
        if not self.hosts.multi:
            return self.policy
        return self.policy.with_arrays(*self.hosts.local((self.policy.trainable, self.policy.base)))


def _model_name(config) -> str:
    name = config.model or DEFAULT_MODEL
    if not config.model:
        log.warning("config.model is empty: training the embedded default %s (give a Qwen3 checkpoint path for "
                    "the paper's setting)", DEFAULT_MODEL)
    return name


def parse_mesh(spec: str):
    """"fsdp:2,tensor:4" -> a device mesh over all devices of all processes ("" -> None: one device, no
    sharding annotations; with several processes "" means "data:<all devices>")."""
    if not spec and jax.process_count() > 1:
        spec = f"data:{jax.device_count()}"
    if not spec:
        return None
    return make_mesh(preflight.mesh_axes(spec))


def build(config) -> Setup:
    """The run's Setup from a config (`preflight.Checked`, or a ConfigDict that is checked here first: every
    value, before a model file is opened)."""
    sections = preflight.check(config)
    config = sections.config
    name = _model_name(config)
    dtype = jnp.dtype(config.dtype)
    mesh = parse_mesh(config.mesh)
    hosts = Hosts(mesh)
    if config.loss.micro_batch_size % hosts.count:
        raise preflight.ConfigError(f"config.loss.micro_batch_size={config.loss.micro_batch_size} must be a multiple "
                                   f"of the {hosts.count} processes (each gives an equal share of every micro-batch)")
    # The prompt file and every rubric are read before a model file is opened: a bad line or a misspelled name
    # is reported in the first seconds, not after a load that takes minutes for a 4B checkpoint.
    reward_cfg = sections["reward"]
    method_cls = plugins.get(plugins.method_name(config))
    default_rubric = load_rubric(config.rubric) if config.rubric else None
    criteria = method_cls.criteria_of(default_rubric, reward_cfg) if default_rubric is not None else []
    method = method_cls(config, reward_cfg, criteria, default_rubric)
    records = select_tasks(load_jsonl(config.data.path), config.data.task, config.data.path)
    if config.data.with_constraints:
        records = [r for r in records if r.constraints]
        if not records:
            raise preflight.ConfigError(f"config.data.with_constraints: no record of {config.data.path!r} has "
                                       f"constraints")
    preflight.check_records(config, records, config.data.path)
    # the method may hold records out of training (held-out pacing) and reads each prompt's own rubric
    records = method.prepare(records)
    dataset = PromptDataset(records, config.prompts_per_step, seed=config.data.seed,
                            shard_index=jax.process_index(), shard_count=jax.process_count())
    base = load_model(name, dtype=dtype, mesh=mesh, **_runtime(config))
    tokenizer = load_tokenizer(config.tokenizer or name)
    # The policy shares the base's arrays (no copy); LoRA wraps the policy's modules only. Full fine-tuning
    # trains these very arrays, already on the mesh as loaded: an update makes new arrays instead of writing
    # into them, so `base` stays the starting weights (reference, judge, bonuses).
    graphdef, state = nnx.split(base)
    policy_model = nnx.merge(graphdef, state)
    if config.finetune == "lora":
        apply_lora(policy_model, sections["lora"], seed=config.seed)
        if mesh is not None:
            shard_model(policy_model, mesh)  # places the new adapters by their logical axes
    loss_cfg = sections["loss"]
    optimizer = make_optimizer(config.optim.lr, warmup_steps=config.optim.warmup_steps, total_steps=config.steps,
                               weight_decay=config.optim.weight_decay, max_grad_norm=config.optim.max_grad_norm,
                               schedule=config.optim.schedule)
    policy = Policy(policy_model, optimizer, loss_cfg, PolicyConfig(
        micro_batch_size=config.loss.micro_batch_size // hosts.count, num_iterations=config.loss.num_iterations,
        temperature=config.sampling.temperature, max_bad_steps=config.loss.max_bad_steps,
        eos_ids=tuple(int(e) for e in tokenizer.eos_ids)),
        place=hosts.rows if mesh is not None else None, fetch=hosts.local_rows, finetune=config.finetune)
    # AdamW's moments follow their parameters' shardings; only its step counter is made on one device.
    policy.opt_state = hosts.on_mesh(policy.opt_state)
    log.info("finetune=%s: training %d parameters", config.finetune,
             sum(x.size for x in jax.tree.leaves(policy.trainable)))
    # Sampling, judging and bonuses run on this process' devices only (rubric_jax.rl.hosts).
    base_graph, base_state = nnx.split(base)
    base_local = nnx.merge(base_graph, hosts.local(base_state)) if hosts.multi else base
    judge_model, judge_tokenizer = load_judge(config, name, base_local, tokenizer, hosts)
    judge_id = model_fingerprint(judge_model)
    judge = Judge(judge_model, judge_tokenizer, sections["judge"], model_id=judge_id,
                  max_response_tokens=config.judge.max_response_tokens) if method.needs_judge() else None
    # One prompt width for the whole run (one sampler program): the rung of the longest prompt it can draw, or
    # max_prompt_len (config.prompt_width).
    encode = lambda r: encode_prompt(tokenizer, r, config.max_prompt_len)[0]  # noqa: E731
    shapes = ShapePlan.build(config.max_prompt_len, config.max_completion_len,
                             [len(encode(r)) for r in dataset.records], width=config.prompt_width)
    log.info("shapes: prompt width %d (ladder %s), completion ladder %s", shapes.prompt_width,
             shapes.prompt_ladder, shapes.completion_ladder)
    hosts.same((shapes.prompt_width, [c.id for c in criteria], len(dataset.records), judge_id),
               "the run's settings")
    plan = None
    if forward_plan.AUTO in (config.forward.remat, config.forward.attention):
        # The update's forward from its own compiled memory at the run's largest micro-batch shape.
        plan = forward_plan.plan_update_forward(
            policy, remat=config.forward.remat, attention=config.forward.attention,
            rows=policy.cfg.micro_batch_size, prompt_width=shapes.prompt_width,
            completion_width=shapes.completion_width(config.max_completion_len),
            memory_fraction=config.forward.memory_fraction, num_iterations=config.loss.num_iterations,
            kl=loss_cfg.kl_coef > 0)
        hosts.same((plan.remat, plan.attention), "the update's forward (config.forward auto)")
    setup = Setup(config, tokenizer, base, policy, judge, criteria, reward_cfg, dataset, dataset.iterator(), hosts,
                  base_local, shapes, method, dynamic=sections["dynamic"],
                  judge_model=judge_model, judge_tokenizer=judge_tokenizer, forward_plan=plan, judge_id=judge_id)
    ctx = plugins.BuildContext(config, tokenizer, base_local, judge, judge_model, judge_tokenizer, dataset.records,
                               hosts, encode, setup.local_policy, judge_id)
    method.build(ctx)
    setup.terms = plugins.make_terms(config, reward_cfg, ctx)
    return setup


def _runtime(config) -> dict:
    """ModelConfig's runtime fields from config.forward, "auto" resolved for a model that takes no gradients
    (the base and a judge; the policy's update is planned after the shapes are known)."""
    from rubric_jax.models.config import RUNTIME_FIELDS

    fwd = config.forward.to_dict()
    return forward_plan.inference_runtime({k: fwd[k] for k in RUNTIME_FIELDS if k in fwd})


def load_judge(config, name: str, base_local, tokenizer, hosts: Hosts):
    """(model, tokenizer) that every judge of the run reads.

    config.judge.model = "" (self-judging, as in the papers): the policy's frozen base on this process' devices
    and the policy's tokenizer, the very arrays the reference reads (nothing loaded). Otherwise that checkpoint,
    frozen, in judge.dtype (default config.dtype), with its own tokenizer: completions reach the judge as text,
    which it encodes itself, so any vocabulary works. A judge.model that names the policy's own checkpoint in
    the same dtype and tokenizer is the self-judge (no second copy of the same weights)."""
    jc = config.judge
    if not jc.model:
        return base_local, tokenizer
    dtype = jnp.dtype(jc.dtype or config.dtype)
    if (dtype == jnp.dtype(config.dtype) and config.tokenizer in ("", jc.model)
            and _same_checkpoint(jc.model, name)):
        log.info("judge.model=%r is the policy's own checkpoint: judging with its frozen base (no second copy)",
                 jc.model)
        return base_local, tokenizer
    # Judging runs on each process' own devices (rubric_jax.rl.hosts), so the judge is loaded straight onto this
    # process' sub-mesh (no mesh on one device): every process reads the file and keeps a whole copy, laid out
    # like base_local over its own fsdp/tensor devices, and no judge program spans hosts.
    model = load_model(jc.model, dtype=dtype, mesh=hosts.local_mesh, **_runtime(config))
    return model, load_tokenizer(jc.model)


def _same_checkpoint(a: str, b: str) -> bool:
    return os.path.realpath(resolve_checkpoint(a)) == os.path.realpath(resolve_checkpoint(b))


def judge_record(setup: Setup) -> dict:
    """What the checkpoint's meta keeps of the judge: the config's judge.model ("" = the policy) and the
    weights' fingerprint, so a resume with another judge (a reward that changed mid-run) can say so."""
    return {"model": setup.config.judge.model, "id": setup.judge_id}


def select_tasks(records, tasks: str, source: str):
    """The records of the listed tasks ("a,b"; "" keeps all)."""
    wanted = [t.strip() for t in tasks.split(",") if t.strip()]
    if not wanted:
        return records
    kept = [r for r in records if r.task in wanted]
    missing = sorted(set(wanted) - {r.task for r in kept})
    if missing:
        have = sorted({r.task for r in records if r.task})
        raise preflight.ConfigError(f"config.data.task: no record of {source!r} has task {missing} (tasks there: "
                                   f"{have})")
    return kept


def encode_prompt(tokenizer, record, max_len: int) -> tuple[list[int], bool]:
    """Chat-templated ids; an over-long prompt keeps its start and the assistant cue (truncated=True)."""
    ids = tokenizer.encode_chat(record.prompt, system=record.system)
    if len(ids) <= max_len:
        return ids, False
    cue = tokenizer.encode(tokenizer.chat("x")[len(tokenizer.chat("x", add_generation_prompt=False)):]) or ids[-4:]
    return ids[: max_len - len(cue)] + cue, True



# A CPU core samples a small model at tens of tokens per second: past this many generated tokens per step
# (and for any multi-billion-parameter model) a step runs for many minutes.
CPU_TOKENS_PER_STEP = 4096
CPU_PARAMS = 1_000_000_000


def run_summary(setup: Setup) -> tuple[list[str], str | None]:
    """Lines printed when a run starts (backend, devices, model size, the per-step volume of rollouts and
    judgments) and a warning when the backend cannot run the config in reasonable time (None if it can)."""
    cfg = setup.config
    params = _params(setup.base)[0]
    trained = sum(int(x.size) for x in jax.tree.leaves(setup.policy.trainable))
    devices = jax.devices()
    kinds = sorted({d.device_kind for d in devices})
    rollouts = cfg.prompts_per_step * cfg.group_size
    tokens = rollouts * cfg.max_completion_len
    lines = [f"backend {jax.default_backend()}: {len(devices)} device(s) ({', '.join(kinds)}) over "
             f"{jax.process_count()} process(es)",
             f"model {_model_name_quiet(cfg)}: {params / 1e6:.1f}M parameters, training {trained / 1e6:.2f}M "
             f"({cfg.finetune})",
             judge_line(setup),
             f"per step: {cfg.prompts_per_step} prompt(s) x {cfg.group_size} rollouts = {rollouts} completions of "
             f"<= {cfg.max_completion_len} tokens (<= {tokens} sampled tokens), micro-batches of "
             f"{cfg.loss.micro_batch_size}"]
    line = setup.method.summary_line()  # the judge's work per step, as the method counts it
    if line:
        lines.append(line)
    warning = None
    judge_params = _params(setup.judge_model)[0] if setup.judge_apart else 0
    if jax.default_backend() == "cpu" and (tokens > CPU_TOKENS_PER_STEP or max(params, judge_params) > CPU_PARAMS):
        warning = (f"this config samples up to {tokens} tokens per step with a {params / 1e6:.0f}M-parameter model "
                   + (f"and judges with a {judge_params / 1e6:.0f}M-parameter one " if judge_params else "")
                   + "on CPU: expect many minutes per step (progress lines follow inside each step). For a smoke "
                   "run use the config's :tiny variant; for the real run use a GPU or TPU host.")
    return lines, warning


def _model_name_quiet(config) -> str:
    return config.model or DEFAULT_MODEL


def _params(model) -> tuple[int, int, str]:
    """(parameter count, bytes, dtype names) of a model's weights."""
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    return (sum(int(x.size) for x in leaves), sum(int(x.nbytes) for x in leaves),
            "/".join(sorted({jnp.dtype(x.dtype).name for x in leaves})))


def judge_line(setup: Setup) -> str:
    """The start-up line that says which model judges (the rewards, pacing, RARE's scores, RLMR's verifier)."""
    cfg = setup.config
    if setup.judge_apart:
        n, nbytes, dtypes = _params(setup.judge_model)
        line = (f"judge: {cfg.judge.model} ({setup.judge_model.cfg.arch}, {n / 1e6:.1f}M parameters, {dtypes}, "
                f"{nbytes / 2 ** 20:.1f} MiB of weights, its own tokenizer)")
    else:
        line = f"judge: the policy's frozen base ({_model_name_quiet(cfg)}, self-judging: no second copy)"
    return setup.method.judge_line(cfg, line)
