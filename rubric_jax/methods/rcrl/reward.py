"""RcRL's reward: judge the rollouts on the active criteria, turn the verdicts into one reward per rollout.

Covers RcRL and every baseline of Table 3 of "Rubric Curriculum RL: Exploiting the Generation-Verification
Gap in Non-Verifiable Domains" through four switches (math: docs/method.md):
  method       pairwise (win rate within the group) or absolute (pointwise scores) (reward.method)
  schedule     curriculum (first K(t) criteria active) or all criteria from step 0
  weighting    emphasis (newest active criterion gets alpha) or equal
  dropout      each step every criterion dropped with probability q, at least one kept
plus the criteria order (the paper's, or a seeded permutation) and the two bonuses (exploration,
usefulness: rubric_jax.methods.terms), standardised within the group and added with their own coefficients.
The per-prompt rubrics and RLMR's writing reward read their verdicts through the same functions, and every
built-in method reads config.reward as `RewardConfig` (`SharedRewardSection`).

Only active, kept criteria are sent to the judge: a curriculum's early steps cost a fraction of the
full rubric. The math lives in rubric_jax.rewards; this module only feeds it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from rubric_jax import rewards as R
from rubric_jax.rewards import compiled as RC  # the per-step math, one program per shape
from rubric_jax.rewards.pacing import PACING_MODES
from rubric_jax.rewards.shaping import NORMALISE, criterion_shares, per_criterion_reward
from rubric_jax.rubrics import Criterion, Rubric


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    method: str = "pairwise"  # pairwise | absolute | rare | rlmr | any registered: rubric_jax.rl.plugins.method_name
    curriculum: bool = True
    interval: int = 100  # steps between criterion introductions
    weighting: str = "emphasis"  # emphasis | equal
    alpha: float = 0.5  # weight of the newest active criterion under emphasis
    order: str = "paper"  # paper | random
    order_seed: int = 0
    dropout_q: float = 0.0  # Dropout RaR: per-step drop probability of each criterion
    exploration_coef: float = 0.0
    exploration_dim: int = 64
    exploration_lambda: float = 1.0
    usefulness_coef: float = 0.0
    verifier_flip: float = 0.0  # RLMR: flip each rollout's violation flag with this probability (label noise)
    # fixed (every `interval` steps) | auto (held-out plateau; rubric_jax.rewards.pacing) | monitor (fixed
    # schedule, held-out readings logged as in auto)
    pacing: str = "fixed"
    # sum (the weighted sum of the criteria's rewards) | per_criterion (each criterion standardised within its
    # group first: rubric_jax.rewards.shaping.per_criterion_reward)
    normalise: str = "sum"

    def __post_init__(self):
        # which names exist is the method registry's to say (rubric_jax.rl.plugins.method_choices; preflight.check)
        if not isinstance(self.method, str) or not self.method:
            raise ValueError(f"reward.method must name a reward method, got {self.method!r}")
        if not 0 <= self.verifier_flip <= 1:
            raise ValueError(f"reward.verifier_flip must be a probability in [0, 1], got {self.verifier_flip}")
        if self.verifier_flip and self.method != "rlmr":
            raise ValueError("reward.verifier_flip flips RLMR's verifier flags: it needs reward.method='rlmr'")
        if self.weighting not in R.CURRICULUM_MODES:
            raise ValueError(f"reward.weighting must be one of {R.CURRICULUM_MODES}, got {self.weighting!r}")
        if self.order not in ("paper", "random"):
            raise ValueError(f"reward.order must be paper or random, got {self.order!r}")
        if not 0 <= self.dropout_q < 1:
            raise ValueError(f"reward.dropout_q must be in [0, 1), got {self.dropout_q}")
        if self.curriculum and self.dropout_q > 0:
            raise ValueError("reward.dropout_q applies to all-criteria runs (Dropout RaR); set curriculum=False")
        if self.interval < 1:
            raise ValueError(f"reward.interval must be >= 1, got {self.interval}")
        if self.normalise not in NORMALISE:
            raise ValueError(f"reward.normalise must be one of {NORMALISE}, got {self.normalise!r}")
        if self.pacing not in PACING_MODES:
            raise ValueError(f"reward.pacing must be one of {PACING_MODES}, got {self.pacing!r}")
        if self.pacing != "fixed" and not (self.curriculum and self.method in ("pairwise", "absolute")):
            raise ValueError(f"reward.pacing={self.pacing!r} paces a curriculum: it needs reward.curriculum=True "
                             "and reward.method pairwise or absolute")


def reward_config(config, term_keys=()) -> RewardConfig:
    """RewardConfig from config.reward. A key RewardConfig does not declare must be one a registered reward term
    owns (`term_keys`: rubric_jax.rl.plugins.term_keys(), its coefficient reward.<term>_coef and its own
    settings); the terms read those."""
    fields = {f.name for f in dataclasses.fields(RewardConfig)}
    values = config.reward.to_dict()
    if values.pop("judging", None) is not None:  # preflight.check moves it first (config_checks.apply_renames)
        raise ValueError("reward.judging is the old name of reward.method: set reward.method")
    unknown = sorted(k for k in values if k not in fields and k not in term_keys)
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}: a reward term's settings are the keys it registers "
                         f"({sorted(term_keys)})")
    return RewardConfig(**{k: v for k, v in values.items() if k in fields})


def ordered_criteria(rubric: Rubric, cfg: RewardConfig) -> list[Criterion]:
    """The rubric's criteria in curriculum order (the paper's, or a seeded random permutation)."""
    crits = list(rubric.criteria)
    if cfg.order == "random":
        crits = [crits[i] for i in np.asarray(R.permute_order(len(crits), cfg.order_seed))]
    return crits


def whole_rubric(config, why: str) -> None:
    """The rule of every built-in method but RcRL's: each step scores every criterion of the rubric, so there is no
    schedule (curriculum or dropout) to follow. `why`: what the method judges, for the error."""
    from rubric_jax.config_checks import fail  # noqa: PLC0415

    for field in ("curriculum", "dropout_q"):
        if config.reward[field]:
            fail(f"reward.{field}", config.reward[field], f"{why}, every criterion at every step: there is no one "
                 f"criteria order for a curriculum or dropout; set reward.curriculum=False and reward.dropout_q=0")


def require_rubric(criteria, reward_cfg) -> None:
    """A method that judges the config's rubric refuses an empty one before the model loads."""
    if not criteria:
        from rubric_jax.config_checks import ConfigError  # noqa: PLC0415

        raise ConfigError(f"config.rubric is empty: reward.method={reward_cfg.method!r} judges with a rubric")


class SharedRewardSection:
    """Mixed into every built-in method (before rubric_jax.rl.plugins.Method): config.reward read as
    `RewardConfig`, its unknown keys refused unless a reward term owns them, and the config rubric's criteria in
    curriculum order."""

    @classmethod
    def reward_section(cls, config, term_keys) -> RewardConfig:
        return reward_config(config, term_keys)

    @classmethod
    def criteria_of(cls, rubric: Rubric, reward_cfg: RewardConfig) -> list[Criterion]:
        return ordered_criteria(rubric, reward_cfg)


def reachable_criteria(criteria: Sequence[Criterion], cfg: RewardConfig, steps: int) -> list[Criterion]:
    """The criteria a run of `steps` steps can judge: under a fixed curriculum the first
    K(steps - 1) = min(C, 1 + floor((steps - 1) / interval)) in curriculum order (docs/method.md), else all
    (dropout draws any of them; held-out pacing may introduce them early). The judge plans its last compiled
    shape for these, so a short run does not pay for criteria it never reaches."""
    if cfg.curriculum and cfg.pacing == "fixed":
        return list(criteria[:int(R.num_active(max(steps - 1, 0), len(criteria), cfg.interval))])
    return list(criteria)


def step_weights(step: int, num_criteria: int, cfg: RewardConfig, key) -> np.ndarray:
    """lambda_c for this step over all criteria in curriculum order (zeros for inactive or dropped)."""
    if cfg.curriculum:
        w = RC.curriculum_weights(step, num_criteria, cfg.interval, alpha=cfg.alpha, mode=cfg.weighting)
    elif cfg.dropout_q > 0:
        w = RC.dropout_weights(key, num_criteria, cfg.dropout_q)
    else:
        w = RC.all_active_weights(num_criteria)
    return np.asarray(w, np.float32)


def group_rewards(results, lambdas, judging: str, normalise: str = "sum") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Verdicts to rewards, the one place every caller turns a judge's results into rewards: per group,
    (r (G,), the per-criterion signal (G, C)) with that group's weights lambda (C,).

      pairwise (pairwise or listwise results)   r_i = sum_c lambda_c w_ic, signal w (win rates; RcRL eq. 1)
      absolute (pointwise results)               r_i = sum_c lambda_c v_ic s_ic / m_c, signal s / m in [0, 1]

    (v: the score was readable; docs/method.md sections 1-2; rubric_jax.rewards holds the formulas).
    normalise "per_criterion": r_i = sum_c lambda_c z_ic, each criterion's term (w_ic, or v_ic s_ic / m_c)
    standardised within the group first (`rubric_jax.rewards.shaping.per_criterion_reward`)."""
    rewards, signal = [], []
    for res, lam in zip(results, lambdas):
        if judging == "pairwise":
            w_gc = np.asarray(res.win_rates)
            r = RC.pairwise_reward(w_gc, lam) if normalise == "sum" else per_criterion_reward(w_gc, lam)
            signal.append(w_gc)
        else:
            x_gc = np.asarray(RC.normalised_scores(res.scores, res.max_points))
            r = (RC.absolute_reward(res.scores, res.max_points, lam, res.valid) if normalise == "sum" else
                 per_criterion_reward(np.where(res.valid, x_gc, 0.0), lam))
            signal.append(x_gc)
        rewards.append(np.asarray(r))
    return rewards, signal


def criterion_metrics(ids: Sequence[str], x_bgc: Sequence[np.ndarray], lams: Sequence[np.ndarray],
                      normalise: str) -> dict[str, float]:
    """reward/criterion/<id>: criterion id's mean reward (win rate or normalised score) and
    adv/criterion_share/<id>: its mean share of the advantage's movement (`rewards.shaping.criterion_shares`),
    over the groups that judge it. ids[b]: group b's criterion ids, x_bgc[b] (G, C_b), lams[b] (C_b,)."""
    sums: dict[str, list[float]] = {}
    for names, x, lam in zip(ids, x_bgc, lams):
        shares = np.asarray(criterion_shares(x, lam, normalise))
        for c, name in enumerate(names):
            acc = sums.setdefault(name, [0.0, 0.0, 0])
            acc[0] += float(np.mean(x[:, c]))
            acc[1] += float(shares[c])
            acc[2] += 1
    out = {}
    for name, (r, share, n) in sums.items():
        out[f"reward/criterion/{name}"] = r / n
        out[f"adv/criterion_share/{name}"] = share / n
    return out


def _judged(judge, prompts, responses, criteria, cfg: RewardConfig, seed: int, group_ids):
    """The judge's results for every group: pairwise (or listwise) win rates, or pointwise scores."""
    if cfg.method == "pairwise":
        return judge.pairwise_batch(list(prompts), [list(r) for r in responses], criteria, seed=seed,
                                    group_ids=group_ids)
    return judge.pointwise_batch(list(prompts), [list(x) for x in responses], criteria)


def judge_rewards(judge, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria: Sequence[Criterion],
                  weights_c: np.ndarray, cfg: RewardConfig, *, seed: int = 0,
                  group_ids: Sequence[int] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """(r_bg, rows): one reward per rollout from the judge over the criteria with weight > 0.

    rows = {"per_c": (B, G, C) win rate or normalised score per criterion (0 where inactive),
            "health": one dict of judge figures per group}; `judge_metrics` turns rows (of one process, or
    merged over all of them) into logged metrics. `group_ids`: each prompt's index in the step's global
    batch, which seeds the judge's per-group randomness (the same pairings however the batch is split).
    """
    active = np.flatnonzero(weights_c > 0)
    crit = [criteria[i] for i in active]
    lam = weights_c[active]
    b, g = len(prompts), len(responses[0])
    per_c = np.zeros((b, g, len(criteria)), np.float32)
    results = _judged(judge, prompts, responses, crit, cfg, seed, group_ids)
    rows, signal = group_rewards(results, [lam] * len(results), cfg.method, cfg.normalise)
    for bi, sig in enumerate(signal):
        per_c[bi][:, active] = sig
    health = [dict(res.metrics) for res in results]
    return np.stack(rows).astype(np.float32), {"per_c": per_c, "health": health}


def judge_rewards_per_prompt(judge, prompts: Sequence[str], responses: Sequence[Sequence[str]],
                             rubrics: Sequence[Rubric], cfg: RewardConfig, *, seed: int = 0,
                             group_ids: Sequence[int] | None = None,
                             observe=None) -> tuple[np.ndarray, dict[str, Any]]:
    """(r_bg, rows) when every prompt has its own rubric (config.rubric_source = record | task): all of a
    prompt's criteria active with equal weights 1/C_b (no curriculum: the criteria differ per prompt).
    This is the "instance-specific rubric" baseline of the RcRL paper (its HealthBench table).

    rows = {"signal": (B,) mean |win rate - 1/2| (pairwise) or mean normalised score (absolute) per group,
            "criteria": (B,) C_b, "health": one dict of judge figures per group}. observe(results) -> rows, when
    given, reads the judge's per-group results for the log (rows["observed"]); it cannot change the rewards."""
    crits = [list(r.criteria) for r in rubrics]
    results = _judged(judge, prompts, responses, crits, cfg, seed, group_ids)
    lams = [np.asarray(RC.all_active_weights(len(cs))) for cs in crits]
    rewards, per_c = group_rewards(results, lams, cfg.method, cfg.normalise)
    # the spread of win rates (pairwise: they average 1/2) or the mean normalised score (absolute)
    signal = [float(np.abs(x - 0.5).mean()) if cfg.method == "pairwise" else float(x.mean()) for x in per_c]
    rows = {"signal": np.asarray(signal, np.float32), "criteria": np.asarray([len(c) for c in crits], np.int32),
            "health": [dict(res.metrics) for res in results],
            "per_criterion": [{"ids": [c.id for c in cs], "x": x, "lam": lam} for cs, x, lam in zip(crits, per_c, lams)]}
    if observe is not None:
        rows["observed"] = observe(results)
    return np.stack(rewards).astype(np.float32), rows


def per_prompt_metrics(rows: dict[str, Any], cfg: RewardConfig) -> dict[str, float]:
    """Figures of `judge_rewards_per_prompt` rows (one process' or pooled)."""
    name = "score/mean" if cfg.method == "absolute" else "win_rate_spread/mean"
    metrics = {name: float(rows["signal"].mean()), "active_criteria": float(rows["criteria"].mean())}
    pc = rows.get("per_criterion", [])
    metrics |= criterion_metrics([p["ids"] for p in pc], [p["x"] for p in pc], [p["lam"] for p in pc], cfg.normalise)
    return metrics | health_metrics(rows["health"])


def health_metrics(health: Sequence[dict]) -> dict[str, float]:
    """judge/<figure>: each judge health figure averaged over the groups that report it."""
    out = {}
    # the last two come from listwise judging (rubric_jax.judge.listwise)
    for k in ("position_bias", "first_position_rate", "saturation", "invalid_fraction", "verdict_entropy",
              "order_agreement", "spread_logit", "spread_sign", "spread_hard", "top_agreement", "position_spread"):
        vals = [h[k] for h in health if k in h]
        if vals:
            out[f"judge/{k}"] = float(np.mean(vals))
    return out


def judge_metrics(rows: dict[str, Any], criteria: Sequence[Criterion], weights_c: np.ndarray,
                  cfg: RewardConfig) -> dict[str, float]:
    """Per-criterion figures and judge health over the groups in `rows` (see `judge_rewards`)."""
    per_c, health = rows["per_c"], rows["health"]
    metrics: dict[str, float] = {}
    for ci in np.flatnonzero(weights_c > 0):
        # Pairwise win rates average exactly 1/2 in every group, so their spread is what carries signal.
        if cfg.method == "absolute":
            metrics[f"score/{criteria[ci].id}"] = float(per_c[:, :, ci].mean())
        else:
            metrics[f"win_rate_spread/{criteria[ci].id}"] = float(np.abs(per_c[:, :, ci] - 0.5).mean())
            metrics[f"win_rate_max/{criteria[ci].id}"] = float(per_c[:, :, ci].max(axis=1).mean())
        metrics[f"weight/{criteria[ci].id}"] = float(weights_c[ci])
    metrics["active_criteria"] = float(np.count_nonzero(weights_c > 0))
    active = np.flatnonzero(weights_c > 0)
    ids = [criteria[ci].id for ci in active]
    metrics |= criterion_metrics([ids] * len(per_c), [g[:, active] for g in per_c], [weights_c[active]] * len(per_c),
                                 cfg.normalise)
    return metrics | health_metrics(health)
