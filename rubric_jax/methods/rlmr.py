"""The RLMR reward method (reward.method="rlmr"): a writing reward, the constraint verifier, their mix.

Source: "RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing" (arXiv 2508.18642); the math is
in rubric_jax.rewards.rlmr and docs/method.md. Per group of G rollouts of one prompt:

  writing reward r   rlmr.writing = "absolute": the self-judge's pointwise rubric score (normalised to [0, 1]);
                     "pairwise": the self-judge's win rate; "reward_model": a sequence-classification reward
                     model's raw score (rlmr.reward_model, a checkpoint directory); "none": 0 for every rollout
                     and the judge never runs (with mix="linear", a = 0: the verifier is the whole reward)
  verifier           violate_i = rollout i breaks at least one of the prompt's constraints
                     (rubric_jax.verifiers: programs and the LLM verifier); with reward.verifier_flip = p each
                     flag is flipped with probability p (label noise, the review's falsifier)
  mix                rlmr.mix = "penalty": r'_i = r_i - delta * violate_i (the group penalty: every violator
                     ends >= gamma below the group mean, so its advantage is negative); a group where every
                     rollout violates carries no constraint signal and is dropped (zero weight, refilled by
                     dynamic sampling). "linear": r' = a * r + b * (1 - violate) (the fixed-weight baseline;
                     a = 1, b = 0 is writing-only, a = 0, b = 1 verifier-only).
  credit             rlmr.credit = "all" (the paper's: a rollout passes when it keeps every constraint) or, with
                     the linear mix only, "share": r' = a * r + b * kept_i / K, the share of the prompt's K
                     constraints rollout i keeps (1 when K = 0). Where prompts carry two instructions, a rollout
                     that keeps one of them then earns half, which the all-or-nothing pass cannot tell from none.
                     "soft" (linear mix only): r' = a * r + b * mean_k p_ik, the LLM verifier's probability that
                     rollout i keeps constraint k (a program's 0/1 where a program checks it): a judge sure of
                     one rollout and unsure of another still tells them apart.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from rubric_jax.config_checks import fail, section
from rubric_jax.methods import agreement
from rubric_jax.methods.per_prompt import load_store
from rubric_jax.methods.rcrl.method import judge_summary
from rubric_jax.methods.rcrl.reward import (SharedRewardSection, judge_metrics, judge_rewards,
                                            judge_rewards_per_prompt, per_prompt_metrics, reachable_criteria,
                                            require_rubric, step_weights, whole_rubric)
from rubric_jax.rewards import compiled as RC  # the per-step math, one program per shape
from rubric_jax.rl.plugins import BuildContext, Method, RewardBatch, RewardOut, register
from rubric_jax.verifiers.constraints import KINDS, Constraint, parse_constraints
from rubric_jax.verifiers.verifier import ConstraintVerifier

log = logging.getLogger(__name__)

WRITING = ("absolute", "pairwise", "reward_model", "none")
CREDITS = ("all", "share", "soft")
MIXES = ("penalty", "linear")
TYPES = tuple(sorted(KINDS))  # fixed order: per-type counts are rows that pool across processes


@dataclasses.dataclass(frozen=True)
class RlmrConfig:
    writing: str = "absolute"
    mix: str = "penalty"
    # gamma: rewards of the default writing reward live in [0, 1]; a margin of a tenth of that range keeps every
    # violator clearly below its group's mean without letting the penalty dwarf the writing differences
    # between compliant rollouts (those are untouched by delta; only the mean moves).
    gamma: float = 0.1
    linear_a: float = 1.0
    linear_b: float = 1.0
    verifier: str = "auto"  # auto | program | llm | both (per-constraint "verify" wins)
    reward_model: str = ""  # rlmr.writing="reward_model": a *ForSequenceClassification checkpoint directory
    reward_model_batch: int = 8
    credit: str = "all"  # all | share | soft (linear mix only): what the verifier's term counts

    def __post_init__(self):
        if self.writing not in WRITING:
            raise ValueError(f"rlmr.writing must be one of {WRITING}, got {self.writing!r}")
        if self.mix not in MIXES:
            raise ValueError(f"rlmr.mix must be one of {MIXES}, got {self.mix!r}")
        if self.gamma <= 0 and self.mix == "penalty":
            raise ValueError(f"rlmr.gamma must be > 0 (the margin that makes violators' advantages negative), "
                             f"got {self.gamma}")
        if self.credit not in CREDITS:
            raise ValueError(f"rlmr.credit must be one of {CREDITS}, got {self.credit!r}")
        if self.credit in ("share", "soft") and self.mix != "linear":
            raise ValueError(f"rlmr.credit={self.credit!r} needs rlmr.mix='linear' (the group penalty reads a "
                             f"violation flag)")
        if self.writing == "reward_model" and not self.reward_model:
            raise ValueError("rlmr.writing='reward_model' needs rlmr.reward_model (a checkpoint directory)")


@dataclasses.dataclass
class RlmrRuntime:
    cfg: RlmrConfig
    verifier: ConstraintVerifier
    constraints: dict[str, tuple[Constraint, ...]]  # by record id
    reward_model: Any = None  # (RewardModel, tokenizer) for writing="reward_model"
    agreement: bool = False  # log the LLM verifier's agreement with the programs (judge.program_agreement)


def record_constraints(cfg: RlmrConfig, records) -> dict[str, tuple[Constraint, ...]]:
    """Every record's constraints by record id, parsed and matched to a verification method (no model needed):
    a bad one stops the run before any model loads, naming the record."""
    verifier = ConstraintVerifier(None, cfg.verifier)
    constraints = {}
    for r in records:
        cs = parse_constraints(r.constraints, where=f"record {r.id!r}")
        verifier.methods(cs)  # a kind the configured verifier cannot check fails here
        constraints[r.id] = cs
    with_c = sum(1 for cs in constraints.values() if cs)
    if not with_c:
        raise ValueError("reward.method='rlmr' but no training record has constraints (the bundled "
                         "creative_writing set has them on about half its prompts)")
    log.info("rlmr: %d of %d records carry constraints", with_c, len(records))
    return constraints


def build(config, judge, records, constraints=None) -> RlmrRuntime:
    """The runtime: the verifier on `judge`, the records' constraints (`record_constraints`, parsed here unless
    given) and the reward model for rlmr.writing="reward_model"."""
    cfg = RlmrConfig(**config.rlmr.to_dict())
    verifier = ConstraintVerifier(judge, cfg.verifier)
    if constraints is None:
        constraints = record_constraints(cfg, records)
    rm = None
    if cfg.writing == "reward_model":
        from rubric_jax.models.reward_model import load_reward_model

        rm = load_reward_model(cfg.reward_model)
    return RlmrRuntime(cfg, verifier, constraints, rm, agreement=bool(config.judge.program_agreement))


def group_keys(key, group_ids: Sequence[int]):
    return [jax.random.fold_in(key, int(i)) for i in group_ids]


def kept_share(passes_gk: np.ndarray) -> np.ndarray:
    """kept_i / K: the share of the prompt's K constraints each rollout keeps, 1 when there are none (rlmr.credit =
    "share"; passes_gk (G, K) bool)."""
    passes_gk = np.asarray(passes_gk, bool)
    if passes_gk.shape[1] == 0:
        return np.ones(passes_gk.shape[0], np.float32)
    return passes_gk.mean(axis=1).astype(np.float32)


def kept_probability(program_gk: np.ndarray, llm_gk: np.ndarray) -> np.ndarray:
    """mean_k P(rollout keeps constraint k) (rlmr.credit = "soft"): the LLM verifier's p_pass where it ran, the
    program's 0/1 where that ran, their product where both did (a constraint both check is kept when both pass
    it); 1 for a prompt without constraints. program_gk, llm_gk: (G, K) with nan where that verifier did not run.

    Where the judge passes nearly everything, the hard share is flat across a group and GRPO learns nothing;
    the probabilities still order the rollouts (evals/reward_forms.py measures how well)."""
    prog, llm = np.asarray(program_gk, np.float32), np.asarray(llm_gk, np.float32)
    if prog.shape[1] == 0:
        return np.ones(prog.shape[0], np.float32)
    p = np.where(np.isnan(prog), 1.0, prog) * np.where(np.isnan(llm), 1.0, llm)
    return p.mean(axis=1).astype(np.float32)


def rewards(rt: RlmrRuntime, writing_fn, records, prompts: Sequence[str], responses: Sequence[Sequence[str]],
            flip: float, key, group_ids: Sequence[int]) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """(r_bg, rows, drop_b) for this process' groups.

    writing_fn(prompts, responses) -> (r_bg, judge rows) gives the judge's writing reward (writing =
    absolute | pairwise); the reward model is run here. rows["rlmr"] holds per-group arrays for
    `rlmr_metrics`; drop_b marks the groups RLMR drops (every rollout violates, penalty mix only).
    """
    cfg = rt.cfg
    if cfg.writing == "reward_model":
        from rubric_jax.models.reward_model import score_texts

        model, tok = rt.reward_model
        flat_p = [p for p, rs in zip(prompts, responses) for _ in rs]
        flat_r = [x for rs in responses for x in rs]
        r_w = score_texts(model, tok, flat_p, flat_r, batch_size=cfg.reward_model_batch).reshape(len(prompts), -1)
        rows: dict[str, Any] = {}
    elif cfg.writing == "none":
        r_w, rows = np.zeros((len(responses), len(responses[0]) if responses else 0), np.float32), {}
    else:
        r_w, judge_rows = writing_fn(prompts, responses)
        rows = {"judge": judge_rows}
    verdicts = rt.verifier.verify(prompts, responses, [rt.constraints[r.id] for r in records])
    v_true = np.stack([v.violate for v in verdicts])
    violate = v_true
    if flip > 0:
        violate = np.stack([np.asarray(RC.flip_labels(k, jnp.asarray(v), flip))
                            for k, v in zip(group_keys(key, group_ids), v_true)])
    r_w = np.asarray(r_w, np.float32)
    if cfg.mix == "penalty":
        r_new, all_v = RC.rlmr_penalty(jnp.asarray(r_w), jnp.asarray(violate), cfg.gamma)
        delta = np.asarray(RC.rlmr_delta(jnp.asarray(r_w), jnp.asarray(violate), cfg.gamma))
        r_new, drop = np.asarray(r_new, np.float32), np.asarray(all_v, bool)
    else:
        kept = 1.0 - jnp.asarray(violate, jnp.float32)
        if cfg.credit == "share":
            kept = jnp.asarray(np.stack([kept_share(v.passes) for v in verdicts]))
        elif cfg.credit == "soft":
            kept = jnp.asarray(np.stack([kept_probability(v.program, v.llm) for v in verdicts]))
        r_new = np.asarray(RC.linear_mix(jnp.asarray(r_w), kept, cfg.linear_a, cfg.linear_b), np.float32)
        delta, drop = np.zeros(len(prompts), np.float32), np.zeros(len(prompts), bool)
    passed, total = np.zeros((1, len(TYPES)), np.int64), np.zeros((1, len(TYPES)), np.int64)
    for v in verdicts:
        for ki, c in enumerate(v.constraints):
            t = TYPES.index(c.family)
            passed[0, t] += int(v.passes[:, ki].sum())
            total[0, t] += v.passes.shape[0]
    rows["rlmr"] = {"writing": r_w, "violate": violate, "violate_verifier": v_true,
                    "has_constraints": np.asarray([bool(v.constraints) for v in verdicts]),
                    "delta": np.asarray(delta, np.float32), "dropped": drop, "type_passed": passed,
                    "type_total": total}
    if rt.agreement:  # after the rewards are fixed: the programs' verdicts are for the log only
        rows["agreement"] = agreement.pointwise_rows(verdicts, responses)
    return r_new, rows, drop


def rlmr_metrics(rows: dict[str, Any], cfg: RlmrConfig) -> dict[str, float]:
    """rlmr/... figures of the groups in `rows` (one process' or pooled)."""
    v, k_n = rows["violate"], rows["violate"].sum(axis=1)
    n = v.shape[1]
    active = (k_n > 0) & (k_n < n)
    m = {"rlmr/writing_mean": float(rows["writing"].mean()), "rlmr/violate_frac": float(v.mean()),
         "rlmr/violators_per_group": float(k_n.mean()), "rlmr/all_violate_groups": float((k_n == n).mean()),
         "rlmr/no_violator_groups": float((k_n == 0).mean()),
         "rlmr/constrained_groups": float(rows["has_constraints"].mean()),
         "rlmr/delta_mean": float(rows["delta"][active].mean()) if active.any() else 0.0,
         "rlmr/delta_max": float(rows["delta"].max(initial=0.0))}
    if np.any(rows["violate"] != rows["violate_verifier"]):
        m["rlmr/flipped_frac"] = float((rows["violate"] != rows["violate_verifier"]).mean())
    passed, total = rows["type_passed"].sum(axis=0), rows["type_total"].sum(axis=0)
    for t, (p, n_t) in enumerate(zip(passed, total)):
        if n_t:
            m[f"verifier_pass/{TYPES[t]}"] = float(p / n_t)
    return m


def violator_adv_max(adv_bg: np.ndarray, violate_bg: np.ndarray, weight_b: np.ndarray) -> float | None:
    """The largest advantage any violator of a weighted group got (RLMR's guarantee: < 0 under the penalty
    mix); None when no weighted group has a violator."""
    mask = np.asarray(violate_bg, bool) & (np.asarray(weight_b)[:, None] > 0)
    return float(np.asarray(adv_bg)[mask].max()) if mask.any() else None


@register("rlmr")
class RlmrMethod(SharedRewardSection, Method):
    """The writing reward (the judge over the config's rubric with all criteria active, a reward model, or none),
    the verifier's flags and their mix; groups where every rollout violates are dropped (penalty mix)."""

    sums_criteria = True  # its writing reward, when judged on a rubric

    @staticmethod
    def validate(config) -> None:
        whole_rubric(config, "reward.method='rlmr' judges the writing")
        section(config, "rlmr", lambda: RlmrConfig(**config.rlmr.to_dict()))
        if config.rlmr.credit in ("share", "soft") and config.reward.verifier_flip > 0:
            fail("rlmr.credit", config.rlmr.credit,
                 "'all' when reward.verifier_flip flips the verifier's pass/violate flags")

    @classmethod
    def config_sections(cls) -> dict[str, dict]:
        # RLMR (reward.method="rlmr"; docs/method.md section 4): writing reward + constraint verifier, mixed per
        # group (RlmrConfig says what each field takes).
        return {"rlmr": dict(
            writing="absolute",  # absolute (judge's pointwise rubric score) | pairwise (win rate) | reward_model | none (0)
            mix="penalty",  # penalty (the group penalty delta) | linear (a * r + b * pass)
            gamma=0.1, linear_a=1.0, linear_b=1.0,
            verifier="auto",  # auto (program where one exists, else the LLM) | program | llm | both
            reward_model="", reward_model_batch=8,
            # all (keeps every constraint) | share (of the constraints kept) | soft (mean P(keeps), the LLM
            # verifier's pass probabilities); share and soft: linear mix only
            credit="all")}

    @classmethod
    def compares_in_group(cls, config) -> bool:
        return config.rlmr.writing == "pairwise"

    def judges_writing(self) -> bool:
        """Whether the writing reward is the judge's over a rubric (not a reward model, not none)."""
        return self.config.rlmr.writing not in ("reward_model", "none")

    def needs_judge(self) -> bool:
        # the LLM verifier asks it about constraints without a program unless rlmr.verifier='program'
        return self.judges_writing() or self.config.rlmr.verifier != "program"

    def summary_line(self) -> str | None:
        return judge_summary(self.config, self.criteria) if self.config.rlmr.writing in ("absolute", "pairwise") \
            else None

    @classmethod
    def judge_line(cls, config, line: str) -> str:
        if config.rlmr.writing != "none":
            return line
        # no writing score: the judge reads only the constraints that no program can check
        return ("judge: none; the reward is the constraint programs' verdicts (rlmr.writing='none', "
                "rlmr.verifier='program')" if config.rlmr.verifier == "program" else
                line.replace("judge: ", "judge (constraints without a program only, rlmr.writing='none'): ", 1))

    def prepare(self, records: list) -> list:
        if self.judges_writing() and self.config.rubric_source == "config":
            require_rubric(self.criteria, self.reward_cfg)
        # the writing judge reads the config's rubric, or each prompt's own (rubric_source = record | task)
        self.store = None
        if self.config.rubric_source != "config":
            self.store = load_store(self.default_rubric, self.config.rubric_source, records)
        self.constraints = record_constraints(RlmrConfig(**self.config.rlmr.to_dict()), records)
        return records

    def build(self, ctx: BuildContext) -> None:
        super().build(ctx)
        if self.judges_writing() and self.store is None:
            ctx.judge.reserve(reachable_criteria(self.criteria, self.reward_cfg, self.config.steps))
        self.rt = build(self.config, ctx.judge, ctx.records, self.constraints)
        # the writing judge's settings; flips are RLMR's
        self.writing_cfg = dataclasses.replace(
            self.reward_cfg, method="pairwise" if self.rt.cfg.writing == "pairwise" else "absolute", verifier_flip=0.0)
        self.weights = None

    def begin_step(self, step: int, key, timer) -> dict[str, float]:
        if self.store is None:  # the config's rubric, all criteria active (RLMR has no curriculum)
            self.weights = step_weights(step, len(self.criteria), self.reward_cfg, jax.random.fold_in(key, 1))
        return {}

    def writing_reward(self, batch: RewardBatch, prompts, responses):
        """The judge's writing reward over the config's rubric (or each prompt's): (r_bg, judge rows)."""
        if self.store is not None:
            return judge_rewards_per_prompt(self.ctx.judge, prompts, responses,
                                            [self.store.get(r) for r in batch.records], self.writing_cfg,
                                            seed=batch.step, group_ids=batch.group_ids)
        return judge_rewards(self.ctx.judge, prompts, responses, self.criteria, self.weights, self.writing_cfg,
                             seed=batch.step, group_ids=batch.group_ids)

    def reward(self, batch: RewardBatch) -> RewardOut:
        r_bg, rows, drop = rewards(self.rt, lambda p, r: self.writing_reward(batch, p, r), batch.records,
                                   batch.prompts, batch.responses, self.reward_cfg.verifier_flip,
                                   jax.random.fold_in(batch.key, 4), batch.group_ids)
        return RewardOut(r_bg, rows, drop, picked={"violate": rows["rlmr"]["violate"]})

    def metrics(self, rows: dict[str, Any], adv_bg, picked) -> dict[str, float]:
        out = rlmr_metrics(rows["rlmr"], self.rt.cfg)
        if "agreement" in rows:
            out.update(agreement.metrics(rows["agreement"]))
        worst = violator_adv_max(adv_bg, picked["violate"], picked["weight"])
        if worst is not None:
            out["rlmr/violator_adv_max"] = worst
        if "judge" in rows and self.store is not None:
            out.update(per_prompt_metrics(rows["judge"], self.writing_cfg))
        elif "judge" in rows:  # not with a reward model or no writing reward
            out.update(judge_metrics(rows["judge"], self.criteria, self.weights, self.writing_cfg))
        return out


# ---------------------------------------------------------------------------------------------
# Config files' building blocks (configs/rlmr*.py, configs/learn_ifeval*.py)

def rlmr_overrides(c: ml_collections.ConfigDict, *, mix: str = "penalty", a: float = 1.0,
                   b: float = 1.0) -> ml_collections.ConfigDict:
    """RLMR and its baselines (docs/method.md §4): the bundled creative-writing prompts that carry constraints,
    the self-judge's pointwise score on one holistic writing criterion as the writing reward, the verifier, GRPO advantages and dynamic
    sampling; `mix`, `a`, `b` pick the method (penalty) or a fixed linear weighting a * r + b * pass."""
    c.data.with_constraints = True
    c.rubric = "writing_quality"  # one holistic score per response, as RLMR's writing reward model gives
    c.reward.method = "rlmr"
    c.reward.curriculum = False
    c.reward.weighting = "equal"
    c.rlmr.mix = mix
    c.rlmr.linear_a, c.rlmr.linear_b = a, b
    c.loss.advantage = "grpo"
    c.loss.aggregation = "token_mean"
    c.dynamic.enabled = True
    c.dynamic.max_rounds = 2
    c.prompts_per_step = 8  # several groups per step, so dynamic sampling has groups to choose between
    c.loss.micro_batch_size = 8
    c.sampling.temperature = 1.0  # the RLMR paper gives no temperature: GRPO's usual 1.0
    c.steps = 500
    return c


def rlmr_tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """:tiny for RLMR: a few more tokens per completion, so starts_with / must_include have text to act on."""
    c.max_completion_len = 24
    c.judge.max_response_tokens = 32
    c.dynamic.max_rounds = 1  # one refill batch at most: the CPU smoke run stays short
    return c
