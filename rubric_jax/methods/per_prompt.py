"""Each prompt judged on its own rubric (config.rubric_source = "record" or "task"): the instance-specific rubric
baseline of "Rubric Curriculum RL" (its HealthBench table) and the static rubrics RARE is compared with.

Every criterion of a prompt's rubric is active with weight 1/C_b (no curriculum: the criteria differ per prompt);
the judge compares the group pairwise (reward.method="pairwise") or scores each rollout ("absolute").
`rubric_jax.methods.rcrl.reward.judge_rewards_per_prompt` holds the arithmetic.
"""

from __future__ import annotations

from typing import Any

from rubric_jax.methods import agreement
from rubric_jax.methods.rcrl.method import JudgedRubric, validate_pacing
from rubric_jax.methods.rcrl.reward import judge_rewards_per_prompt, per_prompt_metrics, whole_rubric
from rubric_jax.rare.store import RubricStore
from rubric_jax.rl.plugins import Method, RewardBatch, RewardOut, register


def load_store(default_rubric, source: str, records) -> RubricStore:
    """Each record's rubric (`source` = record | task), read now: a bad one fails before the model loads."""
    store = RubricStore(default_rubric, source)
    for r in records:
        store.initial(r)
    return store


@register("per_prompt")
class PerPromptMethod(JudgedRubric, Method):
    """Every group judged on its own prompt's rubric, every criterion at weight 1/C_b."""

    @classmethod
    def runs(cls, config) -> bool:
        return super().runs(config) and config.rubric_source != "config"

    @staticmethod
    def validate(config) -> None:
        validate_pacing(config)  # refuses pacing here: there is no one rubric to pace
        whole_rubric(config, f"config.rubric_source={config.rubric_source!r} judges each prompt on its own rubric")

    def prepare(self, records: list) -> list:
        self.store = load_store(self.default_rubric, self.config.rubric_source, records)
        # pairwise verdicts on criteria that are also program-checked instructions: the program's agreement, logged
        self.programs = None
        if self.config.judge.program_agreement and self.reward_cfg.method == "pairwise":
            self.programs = {r.id: agreement.programmatic(r) for r in records}
        return records

    def reward(self, batch: RewardBatch) -> RewardOut:
        rubrics = [self.store.get(r) for r in batch.records]

        def observe(results):
            programs = [self.programs[r.id] for r in batch.records]
            return agreement.pairwise_rows(results, programs, rubrics, batch.responses)

        r_bg, rows = judge_rewards_per_prompt(self.ctx.judge, batch.prompts, batch.responses, rubrics,
                                              self.reward_cfg, seed=batch.step, group_ids=batch.group_ids,
                                              observe=observe if self.programs is not None else None)
        return RewardOut(r_bg, {"judge": rows})

    def metrics(self, rows: dict[str, Any], adv_bg, picked) -> dict[str, float]:
        out = per_prompt_metrics(rows["judge"], self.reward_cfg)
        if "observed" in rows["judge"]:
            out.update(agreement.metrics(rows["judge"]["observed"]))
        return out

