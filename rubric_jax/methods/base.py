"""What every reward method gives the trainer, and the registry that finds a method by name.

The trainer (rubric_jax.rl.trainer) owns the loop: sample, reward, advantages, update, log, save. A method owns
the reward: it turns one batch of rollouts into one reward per rollout, and keeps whatever state it needs across
steps (a curriculum's pacing, RARE's rubric store). The trainer calls a method at five points of a step and never
asks which method it holds:

  begin_step(step, key, timer)      before sampling: schedules (curriculum weights, held-out pacing); metrics
  reward(batch) -> RewardOut        per sampled batch, on this process' groups (inside time/judge)
  commit(rows)                      after the rows of every process are pooled (RARE applies replacements)
  metrics(rows, adv, picked)        the step's figures from the pooled rows
  end_step(step, timer)             after the update (RARE's task-level revisions); metrics

and at three points of a run: `state()` / `set_state(meta, where)` for the checkpoint's meta (each method adds
its own keys to the one checkpoint dict; `snapshot()` is the state before an interrupted step), `on_save(workdir)`
for files beside the checkpoints, and `texts()` for texts.jsonl.

A method is built in two phases so that what a config or a prompt file can get wrong is found before a model
loads: the constructor and `prepare(records)` run first (checks, held-out prompts, rubrics read), `build(ctx)`
once the models are there.

Adding a method: one module here that subclasses `Method`, decorates it with `@register("name")` and imports
itself in `rubric_jax/methods/__init__.py`, plus one config file (docs/architecture.md walks through one).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

METHODS: dict[str, type["Method"]] = {}


def register(name: str):
    """Class decorator: the method answers to `name` (`method_name(config)`)."""

    def deco(cls):
        if name in METHODS and METHODS[name] is not cls:
            raise ValueError(f"two reward methods are registered as {name!r}: {METHODS[name]} and {cls}")
        cls.name = name
        METHODS[name] = cls
        return cls

    return deco


def get(name: str) -> type["Method"]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"no reward method {name!r} (registered: {sorted(METHODS)})") from None


JUDGED = ("pairwise", "absolute")  # reward.method values that ask the run's judge about a rubric


def method_choices() -> tuple[str, ...]:
    """What reward.method may hold: pairwise or absolute (the config's rubric, or each prompt's), or the name
    of any other registered method."""
    return JUDGED + tuple(n for n in METHODS if n not in ("rubric", "per_prompt"))


def method_name(config) -> str:
    """Which registered method a config runs: reward.method names it ("rare", "rlmr"); "pairwise" and
    "absolute" judge the config's rubric, or each prompt's own with rubric_source = record | task."""
    method = config.reward.method
    if method in JUDGED:
        return "rubric" if config.rubric_source == "config" else "per_prompt"
    return method


@dataclasses.dataclass(frozen=True)
class RewardBatch:
    """One sampled batch of this process: B prompts, G rollouts each."""

    records: Sequence[Any]  # the prompt records (rubric_jax.data.PromptRecord)
    prompts: Sequence[str]
    responses: Sequence[Sequence[str]]  # (B, G) decoded completions
    step: int
    group_ids: Sequence[int]  # each prompt's index in the step's global batch: seeds per-group randomness
    key: Any  # the batch's PRNG key (methods fold in their own stream number)


@dataclasses.dataclass
class RewardOut:
    """What a method gives back for one batch.

    reward   (B, G) float32, before the reward terms (bonuses) are added
    rows     per-group results to pool across processes and batches (arrays along axis 0, lists end to end,
             dicts key by key: rubric_jax.rl.hosts.merge_rows); the method reads them back in `commit`/`metrics`
    drop     (B,) groups the update must not use (RLMR: every rollout violates); None = none
    picked   per-group arrays (B, ...) the trainer re-indexes to the groups the update uses, for `metrics`
    """

    reward: np.ndarray
    rows: dict[str, Any]
    drop: np.ndarray | None = None
    picked: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def checked(out: RewardOut, method: str, groups: int, group_size: int) -> RewardOut:
    """`out` after the checks the trainer relies on, each failure naming the method: rewards (B, G) of real numbers
    (NaN is allowed: the update's non-finite guard handles it), `drop` (B,), each `picked` array (B, ...)."""
    shape = np.shape(out.reward)
    if shape != (groups, group_size):
        raise ValueError(f"reward method {method!r} returned rewards of shape {shape} for {groups} groups of "
                         f"{group_size}: want ({groups}, {group_size})")
    if not np.issubdtype(np.asarray(out.reward).dtype, np.number):
        raise ValueError(f"reward method {method!r} returned rewards of dtype {np.asarray(out.reward).dtype}")
    if out.drop is not None and np.shape(out.drop) != (groups,):
        raise ValueError(f"reward method {method!r} returned drop of shape {np.shape(out.drop)}: want ({groups},)")
    for name, arr in out.picked.items():
        if np.shape(arr)[:1] != (groups,):
            raise ValueError(f"reward method {method!r}: picked[{name!r}] has shape {np.shape(arr)}, want "
                             f"({groups}, ...)")
    return out


@dataclasses.dataclass
class BuildContext:
    """What a method may use once the models are loaded (rubric_jax.rl.setup.build)."""

    config: Any
    tokenizer: Any  # the policy's
    base_local: Any  # the frozen base on this process' devices
    judge: Any  # the run's pairwise/pointwise judge (rubric_jax.judge.Judge) over judge_model
    judge_model: Any
    judge_tokenizer: Any
    records: Sequence[Any]  # the training records
    hosts: Any  # rubric_jax.rl.hosts.Hosts
    encode: Callable[[Any], list]  # record -> the policy's prompt ids (chat template, truncation)
    local_policy: Callable[[], Any]  # -> the current policy on this process' devices


class Method(abc.ABC):
    """Base class: a method with no state, no schedule and no pooled bookkeeping. Subclasses implement
    `reward` (abstract: a subclass without it cannot be made) and override whatever else they need."""

    name = "?"
    # the reward is a weighted sum of per-criterion rewards made by rubric_jax.rl.reward.group_rewards, so
    # reward.normalise="per_criterion" applies to it (preflight refuses that setting for any other method)
    sums_criteria = False

    def __init__(self, config, reward_cfg, criteria: Sequence[Any], default_rubric):
        self.config, self.reward_cfg = config, reward_cfg
        self.criteria = list(criteria)  # the config rubric's criteria in curriculum order ([] without one)
        self.default_rubric = default_rubric

    # ---- before any model loads ----------------------------------------------------------------
    @staticmethod
    def validate(config) -> None:
        """Checks of this method's own config section (rubric_jax.rl.preflight.check calls it first thing)."""

    def needs_judge(self) -> bool:
        """Whether the method reads the config's rubric with the run's judge (then config.rubric must be set)."""
        return False

    def prepare(self, records: list) -> list:
        """The training records (a method may hold some out), after reading what they name."""
        return records

    # ---- once the models are loaded ------------------------------------------------------------
    def build(self, ctx: BuildContext) -> None:
        self.ctx = ctx

    @property
    def judge(self):
        """The local judge whose compiled shapes the trainer counts (rl.shapes.JudgePadding); None if none."""
        return self.ctx.judge

    # ---- a step ----------------------------------------------------------------------------------
    def begin_step(self, step: int, key, timer) -> dict[str, float]:
        return {}

    @abc.abstractmethod
    def reward(self, batch: RewardBatch) -> RewardOut:
        """One reward per rollout of `batch`, and the rows the method reads back in `commit` / `metrics`."""

    def commit(self, rows: dict[str, Any]) -> None:
        pass

    def metrics(self, rows: dict[str, Any], adv_bg: np.ndarray, picked: dict[str, np.ndarray]) -> dict[str, float]:
        return {}

    def end_step(self, step: int, timer) -> dict[str, float]:
        return {}

    # ---- the run's state -------------------------------------------------------------------------
    def snapshot(self):
        return None

    def state(self, snap=None) -> dict[str, Any]:
        """The checkpoint meta keys this method adds (from `snap`, a `snapshot()`, when given)."""
        return {}

    def set_state(self, meta: dict[str, Any], where: str) -> None:
        pass

    def on_save(self, workdir: str) -> None:
        pass

    def texts(self) -> dict[str, str]:
        return {}
