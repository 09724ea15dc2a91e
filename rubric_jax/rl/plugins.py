"""What a reward method and a reward term give the trainer, and the registries that find them.

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
loads: `validate(config)` and `reward_section(config, term_keys)` in the config check (rubric_jax.rl.preflight),
the constructor and `prepare(records)` next (held-out prompts, rubrics read), `build(ctx)` once the models are
there.

A reward term (`Term`, `@term("name")`) is a bonus added to any method's reward, weighted by its own coefficient.

Where methods and terms come from: the modules named by the installed packages' entry points of the group
"rubric_jax.plugins" (`load_plugins`), imported on the first lookup. This package's own built-in methods and
terms are one such entry point (setup.py), so rubric_jax.rl imports none of them and a method of another
package is found the same way. Adding a method: one module that subclasses `Method` and decorates it with
`@register("name")`, reachable from an entry point, plus one config file (docs/architecture.md walks through
one).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Sequence

import jax.numpy as jnp
import numpy as np

from rubric_jax.rewards.compiled import standardise_in_group  # one compiled program per shape

METHODS: dict[str, type["Method"]] = {}
TERMS: dict[str, type["Term"]] = {}
ENTRY_POINTS = "rubric_jax.plugins"  # the entry-point group whose modules register methods and terms
_loaded: list[str] = []  # the entry points imported so far (`load_plugins`)


def load_plugins() -> list[str]:
    """Imports the module of every installed entry point of the group "rubric_jax.plugins" (once per process);
    each registers its methods and terms as it is imported. Returns the entry points' names. A module that
    fails to import is named in the error; no entry point at all means the package was never installed."""
    if _loaded:
        return _loaded
    from importlib.metadata import entry_points  # noqa: PLC0415

    found = sorted(entry_points(group=ENTRY_POINTS), key=lambda ep: ep.name)
    if not found:
        raise RuntimeError(f"no reward methods are installed: they register through the entry points of the group "
                           f"{ENTRY_POINTS!r}, which `pip install -e .` writes for this package's own; install "
                           f"the package (README, set-up)")
    for ep in found:
        try:
            ep.load()
        except Exception as e:
            raise RuntimeError(f"the {ENTRY_POINTS!r} entry point {ep.name!r} ({ep.value}) failed to import: "
                               f"{type(e).__name__}: {e}") from e
    _loaded.extend(ep.name for ep in found)
    return _loaded


def register(name: str):
    """Class decorator: the method answers to `name` (`get(name)`; the config's reward.method values it runs
    are its `runs`)."""

    def deco(cls):
        if name in METHODS and METHODS[name] is not cls:
            raise ValueError(f"two reward methods are registered as {name!r}: {METHODS[name]} and {cls}")
        cls.name = name
        METHODS[name] = cls
        return cls

    return deco


def get(name: str) -> type["Method"]:
    load_plugins()
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"no reward method {name!r} (registered: {sorted(METHODS)})") from None


def method_choices() -> tuple[str, ...]:
    """What reward.method may hold: every value some registered method runs (`Method.reward_methods`), in
    registration order."""
    load_plugins()
    out: list[str] = []
    for cls in METHODS.values():
        out += [m for m in cls.reward_methods or (cls.name,) if m not in out]
    return tuple(out)


def method_name(config) -> str:
    """Which registered method a config runs: the one whose `runs(config)` holds (a method may run several
    reward.method values, and share one with another method that takes the other rubric sources)."""
    load_plugins()
    names = [name for name, cls in METHODS.items() if cls.runs(config)]
    if len(names) != 1:
        raise ValueError(f"reward.method={config.reward.method!r} with rubric_source={config.rubric_source!r} is "
                         f"run by {len(names)} registered methods {names}: want exactly one (choices: "
                         f"{method_choices()})")
    return names[0]


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
    judge: Any  # the run's judge (rubric_jax.judge.Judge) over judge_model; None unless `Method.needs_judge()`
    judge_model: Any
    judge_tokenizer: Any
    records: Sequence[Any]  # the training records
    hosts: Any  # rubric_jax.rl.hosts.Hosts
    encode: Callable[[Any], list]  # record -> the policy's prompt ids (chat template, truncation)
    local_policy: Callable[[], Any]  # -> the current policy on this process' devices
    judge_id: str = ""  # the judge model's fingerprint (rubric_jax.judge.common.model_fingerprint)


class Method(abc.ABC):
    """Base class: a method with no state, no schedule and no pooled bookkeeping. Subclasses implement
    `reward` (abstract: a subclass without it cannot be made) and override whatever else they need."""

    name = "?"
    # the reward.method values this method runs (`runs`); () means its registered name alone
    reward_methods: tuple[str, ...] = ()
    # the reward is a weighted sum of per-criterion rewards, so reward.normalise="per_criterion" applies to it
    # (preflight refuses that setting for any other method)
    sums_criteria = False

    def __init__(self, config, reward_cfg, criteria: Sequence[Any], default_rubric):
        self.config, self.reward_cfg = config, reward_cfg
        self.criteria = list(criteria)  # the config rubric's criteria in the method's order ([] without one)
        self.default_rubric = default_rubric

    # ---- the config check, before any model loads (rubric_jax.rl.preflight.check) --------------
    @classmethod
    def runs(cls, config) -> bool:
        """Whether this method runs `config` (`method_name`): by default, when reward.method names it."""
        return config.reward.method in (cls.reward_methods or (cls.name,))

    @classmethod
    def reward_section(cls, config, term_keys: set[str]) -> Any:
        """config.reward as this method reads it (the `reward_cfg` it is made with), checked: by default the
        section itself, frozen. `term_keys`: the keys the registered reward terms own."""
        from ml_collections import FrozenConfigDict  # noqa: PLC0415

        return FrozenConfigDict(config.reward)

    @classmethod
    def config_sections(cls) -> dict[str, dict]:
        """The config sections this method owns, with their defaults (rubric_jax.config_base.base_config adds
        them to every config, so the flags --config.<section>.<key> exist whatever the method)."""
        return {}

    @staticmethod
    def tiny_sections(c) -> None:
        """Shrinks this method's own sections in every config's :tiny variant (rubric_jax.config_base)."""

    @staticmethod
    def validate(config) -> None:
        """Checks of this method's own config section, after the shared sections are checked."""

    @classmethod
    def compares_in_group(cls, config) -> bool:
        """Whether its judge compares the responses of a group (then judge.comparison may be 'listwise')."""
        return False

    @classmethod
    def criteria_of(cls, rubric, reward_cfg) -> list:
        """The config rubric's criteria in the order this method uses them: by default the rubric's."""
        return list(rubric.criteria)

    def needs_judge(self) -> bool:
        """Whether the run's judge is built for this method (`BuildContext.judge`, else None)."""
        return False

    def prepare(self, records: list) -> list:
        """The training records (a method may hold some out), after reading what they name."""
        return records

    def summary_line(self) -> str | None:
        """The start-up line that counts the judge's work per step (rubric_jax.rl.setup.run_summary), if any."""
        return None

    @classmethod
    def judge_line(cls, config, line: str) -> str:
        """The start-up line that says which model judges, as this method uses it (`line`: the run's judge)."""
        return line

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


# ---------------------------------------------------------------------------------------------
# Reward terms: bonuses any method's reward can carry (appendix B of "Rubric Curriculum RL: Exploiting the
# Generation-Verification Gap in Non-Verifiable Domains"; docs/method.md):
#
#   r_i  <-  r_i + coef * (b_i - mean_group(b)) / std_group(b)        for each term with coef != 0
#
# A term is registered with `@term("name")`: a function `(ctx, batch) -> (B, G)` raw bonus per rollout (ctx: the
# run's `BuildContext`, batch: a `TermBatch`), or a `Term` subclass when it keeps state for the checkpoint. Its
# coefficient is `reward.<name>_coef`, a field its config file adds (a subclass may name another key, `coef_key`,
# and own more keys, `keys`). The trainer adds `Term.weighted(bonus)` and logs bonus/<name> (the raw mean); a
# subclass with `standardise = False` is added as it is, coef * b_i: a penalty on an absolute scale (DAPO's
# overlong penalty) must not be rescaled by its group's spread. The built-in terms are in
# rubric_jax.methods.terms.


def term(name: str):
    """Registers a reward term under `name`, weighted by reward.<name>_coef: a `Term` subclass, or a function
    (ctx, batch) -> (B, G) bonus (returned unchanged)."""

    def deco(obj):
        if name in TERMS:
            raise ValueError(f"two reward terms are registered as {name!r}")
        if isinstance(obj, type) and issubclass(obj, Term):
            cls = obj
        else:
            cls = type(f"{name}_term", (Term,), {"bonus": lambda self, batch: obj(self.ctx, batch),
                                                  "__doc__": obj.__doc__})
        cls.name = name
        TERMS[name] = cls
        return obj

    return deco


@dataclasses.dataclass(frozen=True)
class TermBatch:
    """What a term reads of one sampled batch of this process."""

    records: Sequence[Any]
    rollouts: Any  # rubric_jax.rl.policy.RolloutBatch: tokens (B*G, T), masks, prompt width
    prompt_ids: Sequence[Sequence[int]]  # (B,) the encoded prompts
    completions: Sequence[Sequence[int]]  # (B*G,) the completions' token ids
    group_size: int


class Term(abc.ABC):
    name = "?"
    coef_key: str | None = None  # the config.reward key of its coefficient (None: <name>_coef)
    keys: tuple[str, ...] = ()  # further config.reward keys this term owns
    standardise = True  # the bonus is standardised within its group before it is weighted

    def __init__(self, config, reward_cfg, ctx: BuildContext):
        self.config, self.reward_cfg, self.ctx = config, reward_cfg, ctx

    @classmethod
    def coef_name(cls) -> str:
        return cls.coef_key or f"{cls.name}_coef"

    @property
    def coef(self) -> float:
        return float(self.config.reward[self.coef_name()])

    @staticmethod
    def validate(config) -> None:
        """Checks of the term's keys, before any model loads (called when its coefficient is non-zero)."""

    def weighted(self, bonus: np.ndarray) -> np.ndarray:
        """What the term adds to each rollout's reward: coef * standardise_in_group(bonus), or coef * bonus."""
        b = np.asarray(bonus, np.float32)
        return self.coef * (np.asarray(standardise_in_group(jnp.asarray(b))) if self.standardise else b)

    @abc.abstractmethod
    def bonus(self, batch: TermBatch) -> np.ndarray:
        """The raw bonus of each rollout of `batch`, (B, G)."""

    def state(self) -> dict[str, Any]:
        """The checkpoint meta keys this term adds."""
        return {}

    def set_state(self, meta: dict[str, Any]) -> None:
        pass


def active_terms(config) -> list[type[Term]]:
    """The registered terms whose coefficient in config.reward is non-zero, in registration order."""
    load_plugins()
    return [cls for cls in TERMS.values() if config.reward.get(cls.coef_name(), 0.0)]


def term_keys() -> set[str]:
    """Every config.reward key a registered term owns: its coefficient's and its `keys`."""
    load_plugins()
    return {k for cls in TERMS.values() for k in (cls.coef_name(), *cls.keys)}


def make_terms(config, reward_cfg, ctx: BuildContext) -> list[Term]:
    """The terms with a non-zero coefficient, in registration order."""
    return [cls(config, reward_cfg, ctx) for cls in active_terms(config)]
