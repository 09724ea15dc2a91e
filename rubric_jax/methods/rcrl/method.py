"""One rubric for every prompt, judged per criterion: RcRL and the baselines of its Table 3.

"Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable Domains". The judge compares
the rollouts of a group pairwise (reward = win rate, reward.method="pairwise"; listwise with
judge.comparison="listwise") or scores each one (reward.method="absolute"), on the criteria the step's schedule makes
active, weighted by lambda_c:

  reward.curriculum   the first K(t) criteria, the newest weighted alpha (emphasis) or all equally
  reward.dropout_q    all criteria, each dropped with probability q (Dropout RaR)
  otherwise           all criteria, equal weights (Pairwise / Absolute RaR)
  reward.pacing       "auto" / "monitor": the curriculum's arrivals come from held-out readings
                      (rubric_jax.methods.rcrl.pacing_phase), "fixed": every reward.interval steps

The math of weights and rewards lives in rubric_jax.rewards (pure functions over score arrays); this module
picks the step's weights, asks the judge and keeps the pacing state.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rubric_jax.config_checks import fail, section
from rubric_jax.judge.common import judge_config
from rubric_jax.judge.pairings import pairs_per_group
from rubric_jax.methods.rcrl import pacing_phase
from rubric_jax.methods.rcrl.reward import (SharedRewardSection, judge_metrics, judge_rewards, reachable_criteria,
                                            require_rubric, step_weights)
from rubric_jax.rl.plugins import BuildContext, Method, RewardBatch, RewardOut, register


def validate_pacing(config) -> None:
    """reward.pacing "auto" / "monitor": the pacing section, and one rubric to pace (rubric_source='config')."""
    if config.reward.pacing == "fixed":
        return
    from rubric_jax.rewards.pacing import PacingConfig  # noqa: PLC0415

    section(config, "pacing", lambda: PacingConfig.for_interval(config.reward.interval, **config.pacing.to_dict()))
    if config.rubric_source != "config":
        fail("rubric_source", config.rubric_source, f"reward.pacing={config.reward.pacing!r} paces one rubric's "
                                                    "curriculum: it needs rubric_source='config'")


def judge_summary(config, criteria) -> str | None:
    """The start-up line that counts the judge's verdicts per step for the config's rubric (None without one)."""
    c, g, b = len(criteria), config.group_size, config.prompts_per_step
    if not c:
        return None
    if config.reward.method == "pairwise" and config.judge.comparison == "listwise":
        # presentations per group: a Latin square of G orders (rubric_jax.judge.listwise)
        return (f"judge per step: {b} group(s) x {g} presentations of all {g} responses x <= {c} criteria = "
                f"<= {b * g * c} listwise verdicts ({config.judge.mode} mode)")
    if config.reward.method == "pairwise":
        pairs = pairs_per_group(config.judge.pairing, g)
        q = 2 if config.judge.questions == "both" else 1  # "both": each pair asked which is better and which worse
        asked = " x 2 questions" if q == 2 else ""
        return (f"judge per step: {b} group(s) x {pairs} pairs x 2 orders{asked} x <= {c} criteria = "
                f"<= {b * pairs * 2 * q * c} verdicts ({config.judge.mode} mode)")
    return f"judge per step: {b * g} responses x {c} criteria = {b * g * c} scores ({config.judge.mode} mode)"


class JudgedRubric(SharedRewardSection):
    """What RcRL's method and the per-prompt rubrics (rubric_jax.methods.per_prompt) share, mixed in before
    Method: reward.method "pairwise" or "absolute" judged by the run's judge, the verdicts summed over criteria."""

    reward_methods = ("pairwise", "absolute")
    sums_criteria = True

    @classmethod
    def compares_in_group(cls, config) -> bool:
        return config.reward.method == "pairwise"

    def needs_judge(self) -> bool:
        return True

    def summary_line(self) -> str | None:
        return judge_summary(self.config, self.criteria)


@register("rubric")
class RubricMethod(JudgedRubric, Method):
    """Weights for the step from the schedule; rewards from the judge over the active criteria."""

    @classmethod
    def runs(cls, config) -> bool:
        return super().runs(config) and config.rubric_source == "config"

    @classmethod
    def config_sections(cls) -> dict[str, dict]:
        # reward.pacing="auto" (rubric_jax.rewards.pacing; docs/method.md): every `every` steps the policy's greedy
        # answers to `prompts` held-out prompts meet the base's on the newest criterion; the next criterion
        # arrives when that win rate gained <= epsilon over the last `window` readings, between min_interval and
        # max_interval steps after the previous one. 0 = scaled from reward.interval (100: 10, 3, 50, 200).
        return {"pacing": dict(every=0, window=0, epsilon=0.02, min_interval=0, max_interval=0, prompts=16, seed=0)}

    @staticmethod
    def tiny_sections(c) -> None:
        c.pacing.prompts = 2

    @staticmethod
    def validate(config) -> None:
        validate_pacing(config)

    def prepare(self, records: list) -> list:
        require_rubric(self.criteria, self.reward_cfg)
        self.pacing = None
        self.pacing_judge = None
        self.weights = None
        if self.reward_cfg.pacing == "fixed":
            return records
        # held-out prompts leave the training set before the data iterator is made
        from rubric_jax.rewards.pacing import PacingConfig

        self.pacing_cfg = PacingConfig.for_interval(self.reward_cfg.interval, **self.config.pacing.to_dict())
        records, self.heldout = pacing_phase.split_records(records, self.pacing_cfg,
                                                           min_train=self.config.prompts_per_step)
        return records

    def build(self, ctx: BuildContext) -> None:
        super().build(ctx)
        config, rc = self.config, self.reward_cfg
        # the curriculum adds criteria: plan the judge's last compiled shape for all that this run reaches
        ctx.judge.reserve(reachable_criteria(self.criteria, rc, config.steps))
        if rc.pacing == "fixed":
            return
        from rubric_jax.judge import Judge

        ctx.hosts.same([r.id for r in self.heldout.records], "the pacing held-out prompts")
        self.pacing = pacing_phase.build(
            self.pacing_cfg, self.heldout, self.criteria, ctx.tokenizer, max_new_tokens=config.max_completion_len,
            alpha=rc.alpha, mode=rc.weighting, encode=ctx.encode,
            fixed_interval=rc.interval if rc.pacing == "monitor" else 0)
        # its own judge (the training judge's weights, no copy): its 2-response groups would otherwise take
        # compiled shapes from the training judge's budget. A reading averages win rates over prompts, so it reads
        # soft verdicts (logit) unless the training judge generates: discrete ones only add noise to a mean.
        pacing_mode = "generate" if config.judge.mode == "generate" else "logit"
        self.pacing_judge = Judge(ctx.judge_model, ctx.judge_tokenizer,
                                  judge_config(config, mode=pacing_mode, comparison="pairwise", pairing="all"),
                                  max_response_tokens=config.judge.max_response_tokens)

    def begin_step(self, step: int, key, timer) -> dict[str, float]:
        if self.pacing is None:
            self.weights = step_weights(step, len(self.criteria), self.reward_cfg, jax.random.fold_in(key, 1))
            return {}
        # before the step's judge figures start counting
        weights, pace = pacing_phase.advance(self.pacing, step, policy_model=self.ctx.local_policy().model(),
                                             base_model=self.ctx.base_local, judge=self.pacing_judge,
                                             hosts=self.ctx.hosts, timer=timer)
        self.weights = np.asarray(weights, np.float32)
        return pace

    def reward(self, batch: RewardBatch) -> RewardOut:
        r_bg, rows = judge_rewards(self.ctx.judge, batch.prompts, batch.responses, self.criteria, self.weights,
                                   self.reward_cfg, seed=batch.step, group_ids=batch.group_ids)
        return RewardOut(r_bg, {"judge": rows})

    def metrics(self, rows: dict[str, Any], adv_bg, picked) -> dict[str, float]:
        return judge_metrics(rows["judge"], self.criteria, self.weights, self.reward_cfg)

    # the criteria's ids in curriculum order, and the pacing: the arrivals so far and the base answers
    def snapshot(self):
        return None if self.pacing is None else pacing_phase.snapshot(self.pacing)

    def state(self, snap=None) -> dict[str, Any]:
        out = {"criteria": [c.id for c in self.criteria]}
        if self.pacing is not None:
            out["pacing"] = pacing_phase.state_dict(self.pacing, snap)
        return out

    def set_state(self, meta: dict[str, Any], where: str) -> None:
        if self.pacing is not None:
            pacing_phase.set_state(self.pacing, meta.get("pacing"), where)
