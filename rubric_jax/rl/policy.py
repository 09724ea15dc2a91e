"""The GRPO policy update: log-probs of completions, loss gradients over micro-batches, optimizer step.

Two ways to fine-tune (`finetune`):

  lora  the base model with LoRA adapters; only `nnx.LoRAParam` variables are trained. The reference policy
        of the KL term is the same weights with the adapters switched off (`set_lora(model, enabled=False)`
        on the merged module inside the jitted function), so no second copy of the weights exists.
  full  every `nnx.Param` of a model without adapters is trained. The reference is the starting parameter
        state, kept as it was: arrays are immutable, so it shares memory with the policy until the first
        update replaces the policy's arrays, and from then on costs one copy of the weights. Its log-probs
        run through the policy's own compiled program with the reference arrays in place of the policy's.

Log-probs are computed from final hidden states in chunks over time (rubric_jax.rl.logprobs), so the
(B, T, V) logits never sit in memory whole.

Gradient accumulation is exact: each micro-batch contributes grad(numerator) and its LossSums; the sum of
numerator gradients is divided once by the total denominator (docs/method.md, "GRPO with LoRA").
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rubric_jax import progress
from rubric_jax.errors import UserError
from rubric_jax.models.lora import set_lora
from rubric_jax.rl.logprobs import token_logprobs_chunked
from rubric_jax.rl.losses import LossConfig, LossSums, add_sums, finalize, loss_sums


@dataclasses.dataclass
class RolloutBatch:
    """Prompt + completion sequences of one step. Row b*G + g is rollout g of prompt b."""

    tokens_bt: np.ndarray  # (B, Tp + Tc) int32: left-padded prompt, then the completion (pad after its end)
    mask_bt: np.ndarray  # (B, Tp + Tc) bool: real tokens
    prompt_len: int  # Tp: the completion starts at this column for every row
    completion_mask_bt: np.ndarray  # (B, Tc) bool
    adv_b: np.ndarray  # (B,) f32
    old_logp_bt: np.ndarray | None = None  # (B, Tc)
    ref_logp_bt: np.ndarray | None = None  # (B, Tc)
    # (B, Tc): what the sampler recorded for these tokens (the temperature-scaled, untruncated distribution,
    # as the update computes it); only compared with the update's, never used in the loss
    sample_logp_bt: np.ndarray | None = None

    @property
    def size(self) -> int:
        return self.tokens_bt.shape[0]

    def rows(self, sl: slice) -> "RolloutBatch":
        take = lambda x: None if x is None else x[sl]
        return dataclasses.replace(self, tokens_bt=self.tokens_bt[sl], mask_bt=self.mask_bt[sl],
                                   completion_mask_bt=self.completion_mask_bt[sl], adv_b=self.adv_b[sl],
                                   old_logp_bt=take(self.old_logp_bt), ref_logp_bt=take(self.ref_logp_bt),
                                   sample_logp_bt=take(self.sample_logp_bt))


def completion_logprobs(model, tokens_bt, mask_bt, prompt_len: int, *, temperature: float = 1.0,
                        chunk: int = 128):
    """log pi(y_t | x, y_<t) and the entropy of pi at every completion position: (B, Tc) each."""
    hidden, _ = model(tokens_bt, mask_bt=mask_bt, return_hidden=True)
    # Column prompt_len + t holds completion token t; it is predicted from the column before it.
    h = hidden[:, prompt_len - 1: -1]
    targets = tokens_bt[:, prompt_len:]
    return token_logprobs_chunked(h, model.unembed_matrix(), targets, chunk=chunk, temperature=temperature)


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "reference", "temperature", "chunk"))
def _logprobs_jit(graphdef, lora, base, tokens_bt, mask_bt, *, prompt_len, reference, temperature, chunk):
    model = nnx.merge(graphdef, lora, base)
    if reference:
        set_lora(model, enabled=False)
    with jax.named_scope("update/logprobs"):
        return completion_logprobs(model, tokens_bt, mask_bt, prompt_len, temperature=temperature, chunk=chunk)


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "loss_cfg", "temperature", "chunk"))
def _grad_jit(graphdef, lora, base, tokens_bt, mask_bt, comp_mask_bt, adv_b, old_logp_bt, ref_logp_bt, sample_logp_bt,
              key, *, prompt_len, loss_cfg, temperature, chunk):
    def num_fn(lora):
        model = set_lora(nnx.merge(graphdef, lora, base), dropout_key=key)
        logp, ent = completion_logprobs(model, tokens_bt, mask_bt, prompt_len, temperature=temperature,
                                        chunk=chunk)
        old = jax.lax.stop_gradient(logp) if old_logp_bt is None else old_logp_bt
        sums = loss_sums(logp, old, ref_logp_bt, adv_b, comp_mask_bt, loss_cfg, entropy_bt=ent)
        return sums.num, (sums, logp_mismatch(jax.lax.stop_gradient(logp), sample_logp_bt, comp_mask_bt))

    with jax.named_scope("update/grad"):
        grads, (sums, mismatch) = jax.grad(num_fn, has_aux=True)(lora)
    return grads, sums, mismatch


def logp_mismatch(logp_bt, sample_logp_bt, mask_bt):
    """max over completion tokens of |log pi_update(y_t) - log pi_sampler(y_t)|: zero when the sampler and the
    update compute one distribution (docs/method.md section 1), -1 when the sampler's values are absent."""
    if sample_logp_bt is None:
        return jnp.float32(-1.0)
    return jnp.max(jnp.where(mask_bt, jnp.abs(logp_bt - sample_logp_bt), 0.0), initial=0.0)


# No donation: the trainer keeps the pre-step parameters as its crash snapshot.
@functools.partial(jax.jit, static_argnames=("optimizer",))
def _apply_jit(optimizer, lora, opt_state, grad_sum, den):
    return _apply(optimizer, lora, opt_state, grad_sum, den)


@jax.named_scope("update/apply")
def _apply(optimizer, lora, opt_state, grad_sum, den):
    grads = jax.tree.map(lambda g: g / jnp.maximum(den, 1e-8), grad_sum)
    gnorm = optax.tree.norm(grads)
    updates, new_opt = optimizer.update(grads, opt_state, lora)
    new_lora = optax.apply_updates(lora, updates)
    # A finite gradient can still overflow the weights (a learning rate of 1e30): the new weights are checked
    # too, one more pass over the adapters (about 9 ms per update for SmolLM2's r=16 adapters on a 2-core CPU,
    # 0.02% of a step: benchmarks/finite_check.py).
    finite = jnp.isfinite(gnorm) & all_finite(new_lora)
    # A rejected update leaves parameters and optimizer state untouched, so no non-finite weight is ever kept.
    pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
    return pick(new_lora, lora), pick(new_opt, opt_state), gnorm, finite


def all_finite(tree) -> jax.Array:
    """True when every element of every floating leaf of `tree` is finite."""
    leaves = [jnp.isfinite(x).all() for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


@dataclasses.dataclass
class PolicyConfig:
    micro_batch_size: int = 8
    num_iterations: int = 1  # updates per batch (mu); > 1 makes the clipped ratio matter
    temperature: float = 1.0  # the sampling temperature: log-probs are of the same distribution
    logprob_chunk: int = 128
    max_bad_steps: int = 5  # consecutive non-finite updates before the run stops
    eos_ids: tuple[int, ...] = ()  # the tokenizer's end ids: which completions ended (loss.mask_truncated)


def truncated_rows(batch: RolloutBatch, eos_ids) -> np.ndarray:
    """(B,) rows whose completion has no end-of-sequence token: the sampler stopped them at the length cap
    (it stops a completion at its first end id, so "no end id" and "cut at the cap" are the same rows).
    Empty rows (padding groups) are not truncated."""
    if not eos_ids:
        raise ValueError("loss.mask_truncated needs the tokenizer's end-of-sequence ids (PolicyConfig.eos_ids)")
    comp = np.asarray(batch.tokens_bt)[:, batch.prompt_len:]
    cmask = np.asarray(batch.completion_mask_bt, bool)
    ended = (np.isin(comp, np.asarray(eos_ids)) & cmask).any(-1)
    return cmask.any(-1) & ~ended


def mask_truncated(batch: RolloutBatch, eos_ids) -> tuple[RolloutBatch, float]:
    """DAPO's overlong filtering ("DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
    arXiv 2503.14476, section 3.4): a completion cut at the length cap takes no part in the loss, since its
    reward judges an unfinished answer. Returns the batch with those rows' completion masks cleared (they then
    add to no numerator or denominator, like padding rows) and their share of the non-empty rows."""
    cut = truncated_rows(batch, eos_ids)
    rows = max(int(np.asarray(batch.completion_mask_bt, bool).any(-1).sum()), 1)
    cmask = np.asarray(batch.completion_mask_bt, bool) & ~cut[:, None]
    return dataclasses.replace(batch, completion_mask_bt=cmask), float(cut.sum()) / rows


class NonFiniteError(FloatingPointError, UserError):
    """Updates kept coming out non-finite: the run stops (one `error:` line at the command line; the weights
    kept, and saved, are those of the last finite update)."""


def compiled_bytes(compiled) -> dict[str, int]:
    """Per-device bytes of a compiled program (`jit(f).lower(...).compile()`): arguments, outputs, temporaries,
    aliased (donated) and total = arguments + outputs + temporaries - aliased."""
    m = compiled.memory_analysis()
    row = dict(argument_bytes=int(m.argument_size_in_bytes), output_bytes=int(m.output_size_in_bytes),
               temp_bytes=int(m.temp_size_in_bytes), alias_bytes=int(m.alias_size_in_bytes))
    row["total_bytes"] = row["argument_bytes"] + row["output_bytes"] + row["temp_bytes"] - row["alias_bytes"]
    return row


FINETUNE_MODES = ("lora", "full")


class Policy:
    """Owns the trainable parameters (`trainable`: the LoRA adapters, or every weight with finetune="full")
    and the optimizer state; computes log-probs and applies GRPO updates."""

    def __init__(self, model, optimizer: optax.GradientTransformation, loss_cfg: LossConfig,
                 cfg: PolicyConfig = PolicyConfig(), *, place=None, fetch=None, finetune: str = "lora"):
        """`place(rows) -> device array` and `fetch(device array) -> rows` move this process' rows of a
        batch to the devices and back (rubric_jax.rl.hosts.Hosts.rows / local_rows on a multi-host run, where
        micro_batch_size counts this process' rows); by default, plain transfers to and from one device.
        `finetune`: "lora" (a model with adapters) or "full" (a model without; see the module docstring)."""
        if finetune not in FINETUNE_MODES:
            raise ValueError(f"finetune must be one of {FINETUNE_MODES}, got {finetune!r}")
        has_lora = bool(jax.tree.leaves(nnx.state(model, nnx.LoRAParam)))
        if finetune == "lora" and not has_lora:
            raise ValueError("the model has no LoRA parameters: apply_lora first")
        if finetune == "full" and has_lora:
            # nnx.LoRAParam is an nnx.Param: adapters would be trained alongside the weights they adapt.
            raise ValueError("finetune='full' trains the model's own weights: give it a model without LoRA adapters")
        self.finetune = finetune
        self.graphdef, self.trainable, self.base = nnx.split(
            model, nnx.LoRAParam if finetune == "lora" else nnx.Param, ...)
        self.reference = self.trainable if finetune == "full" else None
        self.place = place or jnp.asarray
        self.fetch = fetch or np.asarray
        self.optimizer = optimizer
        self.opt_state = optimizer.init(self.trainable)
        self.loss_cfg = loss_cfg
        self.cfg = cfg
        self.bad_steps = 0
        self.total_bad_steps = 0

    def model(self):
        """The current policy as a module (shares arrays with this object)."""
        return nnx.merge(self.graphdef, self.trainable, self.base)

    def with_arrays(self, trainable, base) -> "Policy":
        """The same policy over other arrays (e.g. this process' view of global ones), with plain
        transfers: for log-probs of local rows. Optimizer state (and a full run's reference) is shared."""
        other = copy.copy(self)
        other.trainable, other.base, other.place, other.fetch = trainable, base, jnp.asarray, np.asarray
        return other

    def _micro(self, batch: RolloutBatch):
        mb = self.cfg.micro_batch_size
        for lo in range(0, batch.size, mb):
            yield batch.rows(slice(lo, lo + mb))

    def logprobs(self, batch: RolloutBatch, *, reference: bool = False) -> np.ndarray:
        """(B, Tc) log-probs of the completions under the current (or reference) policy."""
        params = self.trainable
        if reference and self.reference is not None:
            # The starting weights in the policy's own program: the same compiled code, no adapter switch.
            params, reference = self.reference, False
        out = []
        for mb in self._micro(batch):
            lp, _ = _logprobs_jit(self.graphdef, params, self.base, self.place(mb.tokens_bt),
                                  self.place(mb.mask_bt), prompt_len=batch.prompt_len, reference=reference,
                                  temperature=self.cfg.temperature, chunk=self.cfg.logprob_chunk)
            out.append(self.fetch(lp))
        return np.concatenate(out, axis=0)

    def _grad_args(self, mb: RolloutBatch, key) -> tuple[tuple, dict]:
        put = self.place
        opt = lambda x: None if x is None else put(x)  # noqa: E731
        return ((self.graphdef, self.trainable, self.base, put(mb.tokens_bt), put(mb.mask_bt),
                 put(mb.completion_mask_bt), put(np.asarray(mb.adv_b, np.float32)), opt(mb.old_logp_bt),
                 opt(mb.ref_logp_bt), opt(mb.sample_logp_bt), key),
                dict(prompt_len=mb.prompt_len, loss_cfg=self.loss_cfg, temperature=self.cfg.temperature,
                     chunk=self.cfg.logprob_chunk))

    def update_memory(self, mb: RolloutBatch) -> dict[str, int]:
        """Per-device bytes of the compiled gradient program for one micro-batch shaped like `mb` (compiled,
        never run): arguments, outputs, temporaries, aliased and their total (args + outputs + temps - aliases)."""
        args, kwargs = self._grad_args(mb, jax.random.key(0))
        return compiled_bytes(_grad_jit.lower(*args, **kwargs).compile())

    def configure_forward(self, **runtime) -> None:
        """Sets how the policy's forward runs (ModelConfig's runtime fields: remat, attention, ...) for every
        later sample, log-prob and update; the arrays are untouched."""
        model = self.model().configure(**runtime)
        self.graphdef = nnx.graphdef(model)

    def gradients(self, batch: RolloutBatch, key) -> tuple[Any, LossSums, float]:
        """Sum of numerator gradients over micro-batches, the summed LossSums (not yet divided) and the largest
        sampler/update log-prob difference (`logp_mismatch`; -1 without the sampler's values)."""
        grad_sum, sums, mismatch = None, [], []
        micro = list(self._micro(batch))
        progress.report("update", 0, len(micro), "micro-batches")
        for i, mb in enumerate(micro):
            args, kwargs = self._grad_args(mb, jax.random.fold_in(key, i))
            g, s, mm = _grad_jit(*args, **kwargs)
            grad_sum = g if grad_sum is None else jax.tree.map(jnp.add, grad_sum, g)
            sums.append(s)
            mismatch.append(mm)
            if progress.active():  # count finished micro-batches, waiting one behind so dispatch stays ahead
                jax.block_until_ready(sums[-2] if len(sums) > 1 else s)
                progress.report("update", max(1, len(sums) - 1), len(micro), "micro-batches")
        return grad_sum, add_sums(*sums), float(max(np.asarray(m) for m in mismatch))

    def update(self, batch: RolloutBatch, key) -> dict[str, float]:
        """num_iterations optimizer steps on one batch; returns metrics of the last (and skip counts)."""
        masked = None
        if self.loss_cfg.mask_truncated:
            batch, masked = mask_truncated(batch, self.cfg.eos_ids)
        if self.cfg.num_iterations > 1 and batch.old_logp_bt is None:
            batch = dataclasses.replace(batch, old_logp_bt=self.logprobs(batch))
        if self.loss_cfg.kl_coef != 0 and batch.ref_logp_bt is None:
            batch = dataclasses.replace(batch, ref_logp_bt=self.logprobs(batch, reference=True))
        metrics, mismatch = {}, -1.0
        for it in range(self.cfg.num_iterations):
            grad_sum, sums, mm = self.gradients(batch, jax.random.fold_in(key, it))
            if it == 0:  # later iterations read updated weights: their difference is the update's, not a mismatch
                mismatch = mm
            loss, m = finalize(sums)
            self.trainable, self.opt_state, gnorm, applied = _apply_jit(self.optimizer, self.trainable,
                                                                        self.opt_state, grad_sum, sums.den)
            metrics = {k: float(v) for k, v in m.items()}
            metrics["grad_norm"] = float(gnorm)
            ok = np.isfinite(metrics["loss"]) and bool(applied)
            if ok:
                self.bad_steps = 0
            else:
                self.bad_steps += 1
                self.total_bad_steps += 1
                if self.bad_steps >= self.cfg.max_bad_steps:
                    why = ("the gradient" if not np.isfinite(metrics["grad_norm"]) else
                           "the updated weights (the gradient was finite: the learning rate is too large)")
                    raise NonFiniteError(f"{self.bad_steps} consecutive updates rejected as non-finite in {why}; "
                                         f"loss={metrics['loss']}, grad_norm={metrics['grad_norm']}")
            metrics["skipped_updates"] = float(self.total_bad_steps)
        if mismatch >= 0:
            metrics["mismatch/logp_max"] = mismatch
        if masked is not None:
            metrics["truncated_masked"] = masked
        return metrics


def make_optimizer(lr: float, *, warmup_steps: int, total_steps: int, weight_decay: float = 0.0,
                   max_grad_norm: float = 1.0, b1: float = 0.9, b2: float = 0.999,
                   schedule: str = "cosine") -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay (or constant), after global-norm clipping at max_grad_norm
    (0 = no clipping, as the config documents: optax's clip at 0 would scale every gradient to zero)."""
    warmup_steps = max(0, min(warmup_steps, total_steps))
    if schedule == "cosine":
        sched = optax.warmup_cosine_decay_schedule(0.0 if warmup_steps else lr, lr, warmup_steps,
                                                   max(total_steps, warmup_steps + 1), end_value=0.0)
    elif schedule == "constant":
        sched = optax.join_schedules([optax.linear_schedule(0.0, lr, max(warmup_steps, 1)), optax.constant_schedule(lr)],
                                     [warmup_steps]) if warmup_steps else optax.constant_schedule(lr)
    else:
        raise ValueError(f"unknown schedule {schedule!r} (cosine, constant)")
    if max_grad_norm < 0:
        raise ValueError(f"max_grad_norm must be >= 0 (0 = no clipping), got {max_grad_norm}")
    # identity keeps the chain's shape (and an EmptyState like the clip's), so checkpoints load either way
    clip = optax.clip_by_global_norm(max_grad_norm) if max_grad_norm > 0 else optax.identity()
    return optax.chain(clip, optax.adamw(sched, b1=b1, b2=b2, weight_decay=weight_decay))
