"""How the update's forward runs when the config leaves it to the run: `config.forward.remat="auto"` and/or
`config.forward.attention="auto"` (the defaults).

Rematerialisation and chunked attention buy memory with time. Full remat runs every layer's forward a second
time in the backward (up to half again the FLOPs of a LoRA step, whose frozen base needs no weight gradients);
plain attention keeps each layer's (B, N, T, T) scores and probabilities for the backward. A Qwen3-4B step of 8 x 1792 tokens needs both savings to fit 80 GiB;
SmolLM2-135M on a 24 GiB host needs neither at short lengths and only chunked attention at the paper's. So the
run compiles the update's own gradient program at its largest micro-batch shape (micro_batch_size rows x
the widest prompt + the longest completion; compiled, never run) for each candidate, fastest first:

    remat none + plain attention  ->  remat none + chunked  ->  remat full + chunked

and keeps the first whose compiled bytes (arguments + outputs + temporaries - aliased, per device, plus the
optimizer state) fit `memory_fraction` of the device's memory (the allocator's limit on an accelerator, the
host's available memory on CPU). A field given explicitly stays fixed and only the other varies. When nothing
fits, the leanest candidate is kept with a warning. The choice and every figure are logged, and returned for
the run record.

Sampling and judging never take gradients: the frozen base and a separate judge load with remat none and
chunked attention (which changes nothing below attention_chunk tokens) when a field is "auto".
"""

from __future__ import annotations

import dataclasses
import logging
import os

import jax
import numpy as np

log = logging.getLogger(__name__)

AUTO = "auto"
# Fastest first.
CANDIDATES = (("none", "plain"), ("none", "chunked"), ("full", "chunked"))
# What a model that never takes gradients runs with when a field is "auto".
INFERENCE = {"remat": "none", "attention": "chunked"}


def inference_runtime(forward: dict) -> dict:
    """config.forward with "auto" fields replaced by the inference setting (the base's and judge's load)."""
    return {k: (INFERENCE[k] if v == AUTO else v) for k, v in forward.items()}


def candidates(remat: str, attention: str) -> list[tuple[str, str]]:
    """The (remat, attention) pairs to try, fastest first: "auto" fields vary, explicit ones stay."""
    out = []
    for r, a in CANDIDATES:
        pair = (r if remat == AUTO else remat, a if attention == AUTO else attention)
        if pair not in out:
            out.append(pair)
    return out


def device_memory(device=None) -> tuple[int, str]:
    """(bytes one device can hold, where the figure comes from)."""
    dev = device or jax.local_devices()[0]
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # backends without allocator statistics
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{dev.platform} allocator limit"
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "available host memory"


def _zeros_batch(rows: int, prompt_width: int, completion_width: int, *, old: bool, ref: bool):
    from rubric_jax.rl.policy import RolloutBatch

    t = prompt_width + completion_width
    comp = np.zeros((rows, completion_width), np.float32)
    return RolloutBatch(tokens_bt=np.zeros((rows, t), np.int32), mask_bt=np.ones((rows, t), bool),
                        prompt_len=prompt_width, completion_mask_bt=np.ones((rows, completion_width), bool),
                        adv_b=np.zeros((rows,), np.float32), old_logp_bt=comp if old else None,
                        ref_logp_bt=comp if ref else None, sample_logp_bt=comp)


def _tree_bytes(tree) -> int:
    """Bytes per device of a tree of arrays (the largest shard of each)."""
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.sharding.shard_shape(x.shape) if hasattr(x, "sharding") else np.shape(x)
        total += int(np.prod(shape)) * np.dtype(x.dtype).itemsize
    return total


@dataclasses.dataclass
class ForwardPlan:
    remat: str
    attention: str
    fits: bool
    budget_bytes: int
    budget_source: str
    rows: int
    tokens: int
    tried: list  # [(remat, attention, total bytes incl. optimizer state)]

    def summary(self) -> str:
        gib = lambda b: f"{b / 2 ** 30:.2f} GiB"  # noqa: E731
        tried = ", ".join(f"{r}+{a} {gib(b)}" for r, a, b in self.tried)
        return (f"forward: remat={self.remat} attention={self.attention} "
                f"({'fits' if self.fits else 'DOES NOT FIT'} {gib(self.budget_bytes)}, the share of "
                f"{self.budget_source} allowed; update program at {self.rows} x {self.tokens} tokens: {tried})")

    def record(self) -> dict:
        return dataclasses.asdict(self)


def plan_update_forward(policy, *, remat: str, attention: str, rows: int, prompt_width: int,
                        completion_width: int, memory_fraction: float = 0.8, budget_bytes: int | None = None,
                        num_iterations: int = 1, kl: bool = False) -> ForwardPlan:
    """Chooses and sets (policy.configure_forward) the first candidate whose compiled gradient program at
    (rows, prompt_width + completion_width) fits; see the module docstring. `budget_bytes` overrides the
    device's memory x memory_fraction (tests)."""
    if budget_bytes is None:
        have, source = device_memory()
        budget_bytes = int(have * memory_fraction)
    else:
        source = "the given budget"
    resident = _tree_bytes(policy.opt_state)  # AdamW moments live beside the program across its calls
    mb = _zeros_batch(rows, prompt_width, completion_width, old=num_iterations > 1, ref=kl)
    tried = []
    for r, a in candidates(remat, attention):
        policy.configure_forward(remat=r, attention=a)
        need = policy.update_memory(mb)["total_bytes"] + resident
        tried.append((r, a, need))
        if need <= budget_bytes:
            plan = ForwardPlan(r, a, True, budget_bytes, source, rows, prompt_width + completion_width, tried)
            log.info(plan.summary())
            return plan
    # Nothing fits: keep the leanest (the last tried) and say so; the run may still fit if the estimate is loose.
    plan = ForwardPlan(tried[-1][0], tried[-1][1], False, budget_bytes, source, rows,
                       prompt_width + completion_width, tried)
    log.warning(plan.summary())
    return plan
