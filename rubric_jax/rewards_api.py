"""Rubric rewards for groups of completions, for code that trains outside rubric_jax.

    from rubric_jax.rewards_api import make_judge, score_groups

    judge = make_judge("smollm2-135m-instruct")        # or an HF checkpoint dir, a .gguf file, a loaded model
    out = score_groups(prompts, groups, "creative_writing", judge=judge, mode="pairwise")
    out.rewards          # float32 (Q, G): one reward per completion, in the groups' order
    out.per_criterion    # float32 (Q, G, C): the same per criterion

`groups[q]` holds the G completions of `prompts[q]` (every group the same size, as a GRPO trainer samples
them). The frozen judge scores them with the engine the trainer uses (`rubric_jax.judge`):

  pairwise   win rates: every pair judged in both orders, w_ic = mean over opponents of p_c(i > j)
             (the RcRL paper's pairwise reward; averages exactly 1/2 in each group);
  listwise   the whole group in one judge sequence per presentation and criterion, read as a Plackett-Luce
             first choice (`rubric_jax.judge.listwise`; also averages 1/2);
  pointwise  each completion's expected score on each criterion, divided by its maximum (in [0, 1]).

rewards = sum_c lambda_c x_ic with lambda = `weights` normalised to sum 1 (default equal), i.e.
`rewards.pairwise_reward` for win rates and `rewards.absolute_reward` for scores (docs/method.md), through
`rubric_jax.methods.rcrl.reward.group_rewards`, the verdicts-to-reward step the trainer uses too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from rubric_jax.judge import Judge, Verdicts
from rubric_jax.methods.rcrl.reward import group_rewards
from rubric_jax.rubrics.types import Criterion, Rubric, load_rubric

__all__ = ["MODES", "GroupScores", "make_judge", "score_groups"]

MODES = ("pairwise", "listwise", "pointwise")
DEFAULT_JUDGE = "smollm2-135m-instruct"


@dataclasses.dataclass(frozen=True)
class GroupScores:
    rewards: np.ndarray  # (Q, G) float32
    per_criterion: np.ndarray  # (Q, G, C) float32: win rates (pairwise, listwise) or scores / max (pointwise)
    criteria: tuple[str, ...]  # criterion ids, the C axis
    weights: np.ndarray  # (C,) float32, summing to 1
    mode: str


def make_judge(model: Any = DEFAULT_JUDGE, tokenizer: Any = None, **config) -> Judge:
    """A Judge on `model`: a loaded rubric_jax model (then give its `tokenizer`) or anything `load_model`
    reads (an embedded name, an HF checkpoint directory, a .gguf file). `config`: JudgeConfig and PromptConfig
    fields (mode, pairing, max_response_tokens, ...). Make one and pass it to every `score_groups`
    call: its compiled programs and verdict cache are what make later calls fast."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        from rubric_jax.models.loading import load_model
        from rubric_jax.models.tokenizer import load_tokenizer

        path = str(model)
        model, tokenizer = load_model(path), tokenizer or load_tokenizer(path)
    elif tokenizer is None:
        raise ValueError("make_judge: a loaded model needs its tokenizer (tokenizer=...)")
    return Judge(model, tokenizer, **config)


def _criteria(rubric) -> list[Criterion]:
    if isinstance(rubric, (str, bytes)) or hasattr(rubric, "__fspath__"):
        rubric = load_rubric(rubric)
    crits = list(rubric.criteria) if isinstance(rubric, Rubric) else list(rubric)
    if not crits or not all(isinstance(c, Criterion) for c in crits):
        raise ValueError("rubric: give a Rubric, a non-empty list of Criterion, a built-in rubric name or a JSON path")
    return crits


def _weights(weights, c: int) -> np.ndarray:
    w = np.full(c, 1.0 / c) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    if w.shape != (c,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights: {c} finite non-negative numbers with a positive sum, got {weights!r}")
    return (w / w.sum()).astype(np.float32)


def score_groups(prompts: Sequence[str], groups: Sequence[Sequence[str]], rubric, *, mode: str = "pairwise",
                 judge: Verdicts | None = None, weights=None, seed: int = 0) -> GroupScores:
    """Rewards of every completion of every group (see the module docstring). `judge`: any
    `rubric_jax.judge.Verdicts` (a `Judge`, or a `RemoteJudge` for pairwise and pointwise); default a fresh
    `make_judge()` on the embedded model (slow to build: make one and reuse it). `seed` picks the listwise
    presentation orders."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    prompts, groups = [str(p) for p in prompts], [[str(x) for x in g] for g in groups]
    if len(prompts) != len(groups):
        raise ValueError(f"{len(prompts)} prompts but {len(groups)} groups: one group of completions per prompt")
    if not prompts:
        raise ValueError("score_groups: no prompts")
    sizes = sorted({len(g) for g in groups})
    if len(sizes) != 1 or sizes[0] < 1:
        raise ValueError(f"every group needs the same number (>= 1) of completions, got sizes {sizes}")
    crits = _criteria(rubric)
    lam = _weights(weights, len(crits))
    judge = judge or make_judge()
    if mode == "pointwise":
        results = judge.pointwise_batch(prompts, groups, crits)
    else:  # listwise results carry win rates, as pairwise ones do
        results = judge.pairwise_batch(prompts, groups, crits, seed=seed, comparison=mode)
    rewards, per_c = group_rewards(results, [lam] * len(results), "absolute" if mode == "pointwise" else "pairwise")
    rewards, per_c = np.stack(rewards), np.stack(per_c)
    return GroupScores(rewards.astype(np.float32), per_c.astype(np.float32), tuple(c.id for c in crits), lam, mode)
