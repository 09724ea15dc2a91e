"""DAPO-style dynamic sampling: refill the batch with groups that carry a learning signal.

Source: "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476), dynamic
sampling; used by "RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing" (arXiv 2508.18642),
which also drops the groups whose every rollout breaks a constraint (docs/method.md).

A group whose rewards all agree has zero advantage under grpo, dr_grpo and rloo: it costs a forward and
backward pass and teaches nothing, and it shrinks the effective batch. The trainer therefore

  1. samples `oversample` batches of the step's size (round 0);
  2. keeps a group when its reward spread max - min exceeds `min_spread` and no method drops it (RLMR: all
     rollouts violate);
  3. while fewer than the batch's groups are kept on any process, samples one more batch (an extra round),
     up to `max_rounds` extra rounds;
  4. takes the first kept groups in sampling order; if still short, pads with unkept groups at zero weight:
     their advantages are 0 and their completion masks empty, so they add nothing to the loss and are not
     counted by the token_mean / seq_mean / dr_grpo denominators (rubric_jax.rl.losses), and every step's
     update has the same shapes.

With several processes the decision to sample again is agreed: every process keeps sampling until the
process with the fewest kept groups has enough (or the bound is hit), so all run the same number of rounds.
Everything here is pure numpy over per-group arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

__all__ = ["DynamicConfig", "keep_groups", "select_groups", "Selection", "dynamic_metrics"]


@dataclasses.dataclass(frozen=True)
class DynamicConfig:
    enabled: bool = False
    oversample: int = 1  # batches sampled in round 0 (each of config.prompts_per_step prompts)
    max_rounds: int = 2  # extra rounds of one batch each when too few groups were kept
    min_spread: float = 1e-6  # a group is kept when max(r) - min(r) exceeds this (float judge scores)

    def __post_init__(self):
        if isinstance(self.oversample, bool) or not isinstance(self.oversample, int) or self.oversample < 1:
            raise ValueError(f"dynamic.oversample must be an integer >= 1 (whole batches), got {self.oversample!r}")
        if self.max_rounds < 0:
            raise ValueError(f"dynamic.max_rounds must be >= 0, got {self.max_rounds}")
        if self.min_spread < 0:
            raise ValueError(f"dynamic.min_spread must be >= 0, got {self.min_spread}")


def keep_groups(r_bg: np.ndarray, min_spread: float, drop_b: np.ndarray | None = None) -> np.ndarray:
    """(B,) True for groups with reward spread > min_spread that no method asked to drop (drop_b)."""
    r = np.asarray(r_bg, np.float64)
    keep = (r.max(axis=-1) - r.min(axis=-1)) > min_spread
    if drop_b is not None:
        keep &= ~np.asarray(drop_b, bool)
    return keep


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which sampled groups form the update batch, in order.

    picks: (round/batch index, group index within it) of each of the `need` groups; weight: 1.0 for kept
    groups, 0.0 for padding.
    """

    picks: tuple[tuple[int, int], ...]
    weight: np.ndarray

    @property
    def padded(self) -> int:
        return int(np.sum(self.weight == 0))


def select_groups(keep_per_batch: Sequence[np.ndarray], need: int) -> Selection:
    """The first `need` kept groups over the batches in sampling order; short -> padded with the first unkept
    groups (zero weight). Raises when fewer than `need` groups were sampled at all."""
    kept, unkept = [], []
    for bi, keep in enumerate(keep_per_batch):
        for gi, k in enumerate(np.asarray(keep, bool)):
            (kept if k else unkept).append((bi, gi))
    if len(kept) + len(unkept) < need:
        raise ValueError(f"{len(kept) + len(unkept)} groups sampled, {need} needed")
    picks = kept[:need]
    weight = [1.0] * len(picks)
    if len(picks) < need:
        fill = unkept[:need - len(picks)]
        picks, weight = picks + fill, weight + [0.0] * len(fill)
    return Selection(tuple(picks), np.asarray(weight, np.float32))


def dynamic_metrics(sampled: int, kept: int, extra_rounds: int, padded: int, need: int) -> dict[str, float]:
    """dynamic/kept_frac: kept / sampled groups; dynamic/extra_rounds; dynamic/padded_groups: zero-weight groups
    in the update (all processes); dynamic/sampled_groups."""
    return {"dynamic/kept_frac": kept / sampled if sampled else 0.0, "dynamic/extra_rounds": float(extra_rounds),
            "dynamic/padded_groups": float(padded), "dynamic/sampled_groups": float(sampled),
            "dynamic/batch_fill": (need - padded) / need if need else 1.0}
