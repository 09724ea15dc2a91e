"""The built-in reward terms: bonuses any method's reward can carry, each weighted by its own coefficient
(the protocol and the trainer's arithmetic are rubric_jax.rl.plugins' `Term`; docs/method.md):

  exploration      leverage-score novelty of a rollout's hidden state in its group (RcRL appendix B.1)
  usefulness       how much a rollout shown as an example helps the reference predict its siblings (B.2)
  overlong         DAPO's soft overlong penalty, unstandardised (reward.overlong_penalty)
  length_control   -log L, standardised: the length-controlled reward (reward.length_control)

docs/architecture.md section 7 adds one in a worked example. The bonuses' math (leverage scores, NLL
differences) lives in rubric_jax.rewards; this module connects it to the step.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax import rewards as R
from rubric_jax.config_checks import ConfigError
from rubric_jax.rewards import shaping
from rubric_jax.rl import diagnostics
from rubric_jax.rl.plugins import TERMS, Term, TermBatch, term  # noqa: F401 (TERMS: the registry, read here)
from rubric_jax.rl.policy import truncated_rows

EXPLORATION_STREAM = 0x5EED  # folded into the run's seed: the projection's own random stream


def exploration_projection(seed: int, d_in: int, cfg) -> jnp.ndarray:
    """The run's fixed projection (D, d) of pooled hidden states, drawn from `seed` alone (RcRL appendix B.1
    projects with one fixed matrix, so bonuses of different steps live in one space). The trainer draws it
    once from config.seed and records the seed in the checkpoint, so a resumed run uses the same matrix."""
    key = jax.random.fold_in(jax.random.key(seed), EXPLORATION_STREAM)
    return R.random_projection(key, d_in, cfg.exploration_dim)


def exploration_bonuses(model, tokens_bt, mask_bt, prompt_len: int, group: int, cfg,
                        proj_dk: jnp.ndarray) -> np.ndarray:
    """Leverage-score novelty of each rollout's mean-pooled final hidden state, per group: (B, G).
    proj_dk: the run's fixed projection (`exploration_projection`)."""
    graphdef, state = nnx.split(model)
    pooled = np.asarray(_pooled_hidden(graphdef, state, jnp.asarray(tokens_bt), jnp.asarray(mask_bt),
                                       prompt_len=prompt_len))
    if pooled.shape[-1] != proj_dk.shape[0]:
        raise ValueError(f"exploration projection is {tuple(proj_dk.shape)} but hidden states have "
                         f"{pooled.shape[-1]} features")
    h = jnp.asarray(pooled) @ proj_dk
    h = h.reshape(-1, group, h.shape[-1])
    return np.asarray(jax.vmap(lambda x: R.exploration_bonus(x, cfg.exploration_lambda))(h))


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len"))
def _pooled_hidden(graphdef, state, tokens_bt, mask_bt, *, prompt_len):
    hidden, _ = nnx.merge(graphdef, state)(tokens_bt, mask_bt=mask_bt, return_hidden=True)
    return R.mean_pool(hidden[:, prompt_len:], mask_bt[:, prompt_len:])


def usefulness_bonuses(score_nll, prompt_ids: Sequence[Sequence[int]], completions: Sequence[Sequence[Sequence[int]]],
                       example_ids) -> np.ndarray:
    """u_i = mean_{j != i}[NLL(y_j | x) - NLL(y_j | x, y_i as example)] per group: (B, G).

    `score_nll(contexts, targets) -> per-row mean NLL` runs the reference model; `example_ids(b, y_i)`
    builds prompt b's context that shows y_i as an example before asking the prompt again.
    """
    out = []
    for b, (x, ys) in enumerate(zip(prompt_ids, completions)):
        g = len(ys)
        plain = np.asarray(score_nll([x] * g, ys))
        ctx, tgt = [], []
        for i in range(g):
            for j in range(g):
                ctx.append(example_ids(b, ys[i]) if i != j else x)
                tgt.append(ys[j])
        with_ex = np.asarray(score_nll(ctx, tgt)).reshape(g, g)
        out.append(np.asarray(R.usefulness_bonus(jnp.asarray(plain), jnp.asarray(with_ex))))
    return np.stack(out)


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
