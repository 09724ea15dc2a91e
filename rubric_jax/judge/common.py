"""Judge configuration, statistics, result types and the small helpers the engine builds on."""

from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.judge.pairings import PAIRINGS
from rubric_jax.padding import bucket, pow2, pow2_floor  # noqa: F401 (the engine's names)
from rubric_jax.judge.prompts import PromptConfig  # noqa: F401 (the engine's names)
from rubric_jax.rubrics.types import Criterion, Rubric

# what `JudgeConfig.comparison` (and the run's judge.comparison) accepts: pairs of a group's responses, scheduled
# by `pairing`, or the whole group in one judge sequence per presentation (rubric_jax.judge.listwise)
COMPARISONS = ("pairwise", "listwise")

MODES = ("logit", "sign", "hard", "generate")
SHARING = ("tree", "none")
# which pairwise question(s) the judge is asked (JudgeConfig.questions; pair_readout.combine_readings)
QUESTIONS = ("better", "worse", "both")


# ---------------------------------------------------------------------------------------------
# Configuration, statistics, results


def check_questions(questions: str, mode: str, pairing: str, comparison: str = "pairwise") -> None:
    """The worse and pooled readings need the same pairs judged by both questions (no Swiss rounds, no listwise
    sequences) and probabilities to invert and pool (no generate mode)."""
    if questions != "better" and (mode == "generate" or pairing == "swiss" or comparison == "listwise"):
        raise ValueError(f"questions={questions!r} needs mode logit, sign or hard, comparison pairwise and pairing "
                         f"all or circular (got mode={mode!r}, comparison={comparison!r}, pairing={pairing!r})")


def pairing_problem(pairing: str) -> str | None:
    """Why `pairing` is no pair schedule (None when it is): listwise judging is a comparison, not a pairing."""
    if pairing == "listwise":
        return "pairing: 'listwise' is a comparison, not a pairing of responses: set comparison='listwise'"
    if pairing not in PAIRINGS:
        return f"pairing: unknown {pairing!r}; expected one of {PAIRINGS}"
    return None


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
    prompt: PromptConfig = PromptConfig()
    # logit | sign | hard | generate (docs/method.md, "Judge"). "sign" (discrete verdicts with the position
    # preference averaged out first) is as accurate as "logit" and spreads a group's win rates far more
    # (the judge-fidelity study, docs/judge.md "Judge fidelity").
    mode: str = "sign"
    # pairwise (pairs of the group's responses, scheduled by `pairing`) | listwise (the whole group in one
    # sequence per presentation and criterion, rubric_jax.judge.listwise; `pairwise_batch` hands such calls to it)
    comparison: str = "pairwise"
    pairing: str = "all"  # all | circular | swiss: which pairs of a group are judged, each in both orders
    circular_k: int = 1
    sharing: str = "tree"  # tree (prefix-shared) | none (each judgment a full sequence)
    tokens_per_call: int = 0  # padded tokens per scoring call; 0 = 16k on CPU, 128k on accelerators
    lane_tokens: int = 128  # lane lengths tried for packing criterion suffixes go up to 4x this
    len_steps: int = 4  # length buckets per octave (16, 20, 24, 28, 32, 40, ...)
    # Compiled scoring shapes per kind over the judge's life (the last one is a ceiling that fits
    # what comes later), and how much padding a reused shape may cost relative to a fresh one.
    max_shapes: int = 4
    reuse_slack: float = 2.0
    min_verdict_mass: float = 0.0  # logit/hard: invalid if the verdict tokens hold less probability
    cache_entries: int = 1_000_000  # judgment cache size (0 disables it)
    # generate mode
    gen_max_new_tokens: int = 64
    gen_temperature: float = 1.0
    gen_top_k: int = 1  # greedy by default
    gen_batch: int = 64  # prompts per sampler call
    gen_ignore_eos: bool = False  # always generate gen_max_new_tokens (benchmarks)
    # Pairwise question: "better" (the prompt above), "worse" (prompts.WORSE_PROMPT, its verdict read inverted)
    # or "both": each reading's both-orders probability pooled in log-odds, the worse one weighted by
    # worse_weight (pair_readout.combine_readings). "both" costs two passes; it lifted Qwen2.5-Coder-1.5B from
    # 0.58 (better) and 0.86 (worse) to 0.94 on the fidelity study's tuning kinds, where 3.0 is about the ratio
    # of the better reading's log-odds spread to the worse one's (docs/method.md, "Judge fidelity").
    questions: str = "better"
    worse_weight: float = 3.0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode: unknown {self.mode!r}; expected one of {MODES}")
        if self.comparison not in COMPARISONS:
            raise ValueError(f"comparison: unknown {self.comparison!r}; expected one of {COMPARISONS}")
        if pairing_problem(self.pairing):
            raise ValueError(pairing_problem(self.pairing))
        if self.sharing not in SHARING:
            raise ValueError(f"sharing: unknown {self.sharing!r}; expected one of {SHARING}")
        if self.questions not in QUESTIONS:
            raise ValueError(f"questions: unknown {self.questions!r}; expected one of {QUESTIONS}")
        if self.questions != "better":
            check_questions(self.questions, self.mode, self.pairing, self.comparison)
            if not (self.worse_weight > 0 and np.isfinite(self.worse_weight)):
                raise ValueError(f"worse_weight: must be a positive number, got {self.worse_weight!r}")
        if self.max_shapes < 1:
            raise ValueError(f"max_shapes: must be >= 1, got {self.max_shapes}")


def judge_config(config, **over) -> JudgeConfig:
    """The pairwise judges' JudgeConfig from config.judge (`over`: fields a particular judge sets itself)."""
    j = config.judge
    fields = dict(mode=j.mode, comparison=j.comparison, pairing=j.pairing, questions=j.questions,
                  worse_weight=float(j.worse_weight))
    return JudgeConfig(**{**fields, **over})


def comparison_problem(config, compares_in_group: bool) -> str | None:
    """Why config.judge.comparison cannot run (None when it can): listwise judging gives win rates within a
    group, so the reward method must compare a group's responses (`compares_in_group`), and its prompts label
    the responses A..Z."""
    if config.judge.comparison != "listwise":
        return None
    if not compares_in_group:
        return ("listwise judging gives win rates within a group: it needs reward.method='pairwise' (or 'rlmr' "
                "with rlmr.writing='pairwise')")
    from rubric_jax.judge.listwise import LIST_LABELS  # noqa: PLC0415 (listwise builds on this module)

    if config.group_size > len(LIST_LABELS):
        return f"listwise prompts label responses A..Z: group_size {config.group_size} is over {len(LIST_LABELS)}"
    return None


@dataclasses.dataclass
class JudgeStats:
    """Running totals over the judge's life (reset with `reset`)."""

    judgments: int = 0  # verdicts computed by the model
    cache_hits: int = 0  # verdicts served from the cache
    truncations: int = 0  # responses cut to the token budget
    prompt_truncations: int = 0
    invalid: int = 0  # verdicts that could not be read
    model_calls: int = 0
    padded_tokens: int = 0  # tokens the device processed, padding included
    real_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    shapes: set = dataclasses.field(default_factory=set)  # distinct jitted call signatures

    @property
    def compilations(self) -> int:
        return len(self.shapes)

    def as_dict(self) -> dict[str, float]:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "shapes"}
        d["compilations"] = self.compilations
        d["judgments_per_s"] = self.judgments / self.seconds if self.seconds > 0 else 0.0
        return d

    def reset(self) -> None:
        self.__dict__.update(JudgeStats().__dict__)


@dataclasses.dataclass
class PairwiseResult:
    p: np.ndarray  # (G, G, C) p_c(i > j), p + p^T = 1 off the diagonal, 0.5 on it and on unjudged pairs
    p_first: np.ndarray  # (G, G, C) P(first wins | a first, b second), NaN where not judged
    valid: np.ndarray  # (G, G, C) bool: the ordered judgment (a first, b second) gave a readable verdict
    mask: np.ndarray  # (G, G) bool: pairs judged (symmetric, diagonal False)
    win_rates: np.ndarray  # (G, C) over judged pairs (rewards.win_rates)
    metrics: dict[str, float]


@dataclasses.dataclass
class PointwiseResult:
    scores: np.ndarray  # (G, C) float: expected score (logit, sign), argmax (hard) or parsed (generate)
    valid: np.ndarray  # (G, C) bool
    probs: np.ndarray  # (G, C, M + 1) distribution over digits 0..M (zeros above each m_c); NaN in generate
    max_points: np.ndarray  # (C,) m_c
    metrics: dict[str, float]


# ---------------------------------------------------------------------------------------------
# Helpers


def as_criteria(criteria) -> list[Criterion]:
    if isinstance(criteria, Rubric):
        return list(criteria.criteria)
    if isinstance(criteria, Criterion):
        return [criteria]
    out = list(criteria)
    for k, c in enumerate(out):
        if not isinstance(c, Criterion):
            raise TypeError(f"criteria[{k}]: expected a Criterion, got {type(c).__name__}")
    if not out:
        raise ValueError("criteria: need at least one criterion")
    return out


def criteria_per_prompt(criteria, n: int) -> list[list[Criterion]]:
    """One criteria list per prompt from one rubric for all (a Rubric, a Criterion or a list of them) or a
    list of n rubrics."""
    if isinstance(criteria, (Rubric, Criterion)):
        return [as_criteria(criteria)] * n
    criteria = list(criteria)
    if criteria and all(isinstance(c, Criterion) for c in criteria):
        return [as_criteria(criteria)] * n
    if len(criteria) != n:
        raise ValueError(f"criteria: expected one rubric for all prompts or one per prompt ({n}), "
                         f"got {len(criteria)}")
    return [as_criteria(c) for c in criteria]


def model_fingerprint(model) -> str:
    """Identifies a model's weights cheaply (config plus a few parameter slices)."""
    h = hashlib.sha256(repr(model.cfg).encode())
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    for x in leaves[:2] + leaves[-2:]:
        h.update(np.asarray(jnp.ravel(jnp.asarray(x))[:256], np.float32).tobytes())
    return f"{model.cfg.name}:{h.hexdigest()[:16]}"
