"""Reward terms: bonuses any method's reward can carry, standardised within each group and added with their own
coefficient (appendix B of "Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable
Domains"; docs/method.md):

  r_i  <-  r_i + coef * (b_i - mean_group(b)) / std_group(b)        for each term with coef != 0

A term is registered with `@term("name")`: a function `(ctx, batch) -> (B, G)` raw bonus per rollout (ctx: the
run's `BuildContext`, batch: a `TermBatch`), or a `Term` subclass when it keeps state for the checkpoint. Its
coefficient is `reward.<name>_coef`, a field its config file adds (a subclass may name another key, `coef_key`,
and own more keys, `keys`). The trainer standardises the bonus within each group, weights it, adds it and logs
bonus/<name> (the raw mean); a subclass with `standardise = False` is added as it is, coef * b_i: a penalty on
an absolute scale (DAPO's overlong penalty) must not be rescaled by its group's spread. docs/architecture.md
section 7 has a worked example. The bonuses' math (leverage scores, NLL differences) lives in rubric_jax.rewards
and rubric_jax.rl.reward; this module only connects them to the step.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from rubric_jax.config_checks import ConfigError
from rubric_jax.methods.base import BuildContext
from rubric_jax.rewards import shaping
from rubric_jax.rewards.compiled import standardise_in_group  # one compiled program per shape
from rubric_jax.rl import diagnostics
from rubric_jax.rl.policy import truncated_rows
from rubric_jax.rl.reward import exploration_bonuses, exploration_projection, usefulness_bonuses

TERMS: dict[str, type["Term"]] = {}


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
    return [cls for cls in TERMS.values() if config.reward.get(cls.coef_name(), 0.0)]


def term_keys() -> set[str]:
    """Every config.reward key a registered term owns: its coefficient's and its `keys`."""
    return {k for cls in TERMS.values() for k in (cls.coef_name(), *cls.keys)}


def make_terms(config, reward_cfg, ctx: BuildContext) -> list[Term]:
    """The terms with a non-zero coefficient, in registration order."""
    return [cls(config, reward_cfg, ctx) for cls in active_terms(config)]


@term("exploration")
class Exploration(Term):
    """Leverage-score novelty of each rollout's mean-pooled final hidden state (of the frozen base) within its
    group, in one fixed random projection drawn from config.seed (RcRL appendix B.1). The projection's seed is
    kept in the checkpoint ("exploration_seed"), so a resumed run redraws the same matrix."""

    def __init__(self, config, reward_cfg, ctx):
        super().__init__(config, reward_cfg, ctx)
        self.set_seed(config.seed)

    def set_seed(self, seed: int) -> None:
        self.seed = int(seed)
        self.proj = exploration_projection(self.seed, self.ctx.base_local.cfg.hidden_size, self.reward_cfg)

    def bonus(self, batch: TermBatch) -> np.ndarray:
        r = batch.rollouts
        return exploration_bonuses(self.ctx.base_local, r.tokens_bt, r.mask_bt, r.prompt_len, batch.group_size,
                                   self.reward_cfg, self.proj)

    def state(self) -> dict[str, Any]:
        return {"exploration_seed": self.seed}

    def set_state(self, meta: dict[str, Any]) -> None:
        if "exploration_seed" in meta:
            self.set_seed(meta["exploration_seed"])


@term("usefulness")
class Usefulness(Term):
    """How much a rollout, shown as an example, lowers the reference's NLL of its siblings (RcRL appendix B.2)."""

    def bonus(self, batch: TermBatch) -> np.ndarray:
        policy, tok, g = self.ctx.local_policy(), self.ctx.tokenizer, batch.group_size
        groups = [batch.completions[b * g:(b + 1) * g] for b in range(len(batch.prompt_ids))]
        return usefulness_bonuses(lambda ctx, tgt: diagnostics.mean_nll(policy, ctx, tgt, tok), batch.prompt_ids,
                                  groups,
                                  lambda b, y: diagnostics.example_context(tok, batch.records[b], tok.decode(y)))


def completion_lengths(batch: TermBatch) -> np.ndarray:
    """(B, G) completion tokens of each rollout, the end token included."""
    return np.asarray([len(c) for c in batch.completions], np.float32).reshape(-1, batch.group_size)


@term("overlong")
class Overlong(Term):
    """DAPO's soft overlong penalty (`rubric_jax.rewards.shaping.overlong_penalty`): 0 up to
    max_completion_len - reward.overlong_buffer tokens, then falling linearly to -1 at the cap, and -1 for a
    completion cut there; added unstandardised, times reward.overlong_penalty. bonus/overlong logs the mean."""

    coef_key = "overlong_penalty"
    keys = ("overlong_buffer",)
    standardise = False

    @staticmethod
    def validate(config) -> None:
        buf, cap = config.reward.get("overlong_buffer", 0), config.max_completion_len
        if not (isinstance(buf, int) and 0 < buf <= cap):
            raise ConfigError(f"config.reward.overlong_buffer={buf!r}: the penalty ramps over the last buffer tokens "
                              f"before max_completion_len={cap}: an integer in [1, {cap}]")

    def bonus(self, batch: TermBatch) -> np.ndarray:
        # the rows loss.mask_truncated leaves out of the loss, by the same rule
        cut = truncated_rows(batch.rollouts, tuple(self.ctx.tokenizer.eos_ids)).reshape(-1, batch.group_size)
        return np.asarray(shaping.overlong_penalty(completion_lengths(batch), cut, self.config.max_completion_len,
                                                   int(self.config.reward.overlong_buffer)))


@term("length_control")
class LengthControl(Term):
    """The length-controlled reward, r_i - coef * (log L_i - mean_g log L) / std_g log L: for runs whose audit
    (judge/length_corr) shows the judge rewarding length; coef is reward.length_control. The bonus is -log L,
    standardised within the group and weighted like any term (`Term.weighted`)."""

    coef_key = "length_control"

    def bonus(self, batch: TermBatch) -> np.ndarray:
        return -np.log(np.maximum(completion_lengths(batch), 1.0))
