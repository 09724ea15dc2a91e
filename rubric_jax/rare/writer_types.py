"""The RARE rubric writer's request, outcome and settings (rubric_jax.rare.writer writes; these types are what
its prompts, its validation and its callers share, so they live apart from it)."""

from __future__ import annotations

import dataclasses

import numpy as np

from rubric_jax.rubrics.types import Criterion, Rubric

DIRECTIONS = ("negative", "positive", "mixed", "any")
MODES = ("replace", "revise", "refine", "propose")
WHOLE_RUBRIC_MODES = ("revise", "refine")  # every criterion rewritten, in rubric order


@dataclasses.dataclass(frozen=True, eq=False)
class WriteRequest:
    """One writing request. scores/valid: (G, C), columns in rubric order. `eligible` are the criteria the
    answer takes the place of: saturated ones (replace), every id in order (revise, refine) or the empty slots
    (propose). queries/notes: empty, or one per response (evidence drawn from many queries, e.g. "group mean
    reward 0.62, rank 3 of 14"). inactive: criteria used before and dropped, never to be restated."""

    query: str
    rubric: Rubric
    eligible: tuple[str, ...]
    count: int  # b: how many criteria to write
    direction: str  # one of DIRECTIONS
    responses: tuple[str, ...]
    scores: np.ndarray
    valid: np.ndarray
    mode: str = "replace"
    queries: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    inactive: tuple[Criterion, ...] = ()

    def __post_init__(self) -> None:
        for f in ("eligible", "responses", "queries", "notes", "inactive"):
            object.__setattr__(self, f, tuple(getattr(self, f)))
        object.__setattr__(self, "scores", np.asarray(self.scores))
        object.__setattr__(self, "valid", np.asarray(self.valid, bool))
        if self.mode not in MODES:
            raise ValueError(f"mode: unknown {self.mode!r}; expected one of {MODES}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction: unknown {self.direction!r}; expected one of {DIRECTIONS}")
        unknown = [c for c in self.eligible if c not in self.rubric.ids]
        if unknown or len(set(self.eligible)) != len(self.eligible):
            raise ValueError(f"eligible: {self.eligible} must be distinct ids of the rubric {self.rubric.ids}")
        if not 1 <= self.count <= len(self.eligible):
            raise ValueError(f"count: must be in 1..{len(self.eligible)} (the eligible criteria), got {self.count}")
        if self.whole_rubric and (self.eligible != self.rubric.ids or self.count != len(self.rubric)):
            raise ValueError(f"{self.mode} mode rewrites the whole rubric: eligible must be every id in rubric "
                             f"order {self.rubric.ids} and count {len(self.rubric)}; got {self.eligible}, "
                             f"count {self.count}")
        if self.mode == "propose" and self.count != len(self.eligible):
            raise ValueError(f"propose mode fills every slot: count must equal the {len(self.eligible)} slot ids "
                             f"in eligible, got {self.count}")
        for f in ("queries", "notes"):
            got = getattr(self, f)
            if got and len(got) != len(self.responses):
                raise ValueError(f"{f}: one per response ({len(self.responses)}) or none, got {len(got)}")
            if not all(isinstance(x, str) for x in got):
                raise ValueError(f"{f}: must be strings")
        if not all(isinstance(c, Criterion) for c in self.inactive):
            raise ValueError("inactive: must be Criterion objects")
        shape = (len(self.responses), len(self.rubric))
        if self.scores.shape != shape or self.valid.shape != shape:
            raise ValueError(f"scores/valid: expected shape {shape} (responses, criteria), got "
                             f"{self.scores.shape} and {self.valid.shape}")

    @property
    def whole_rubric(self) -> bool:
        return self.mode in WHOLE_RUBRIC_MODES

    @property
    def retained(self) -> tuple[Criterion, ...]:
        return tuple(c for c in self.rubric if c.id not in self.eligible)

    def allowed_polarities(self) -> tuple[str, ...]:
        return ("negative", "positive") if self.direction in ("mixed", "any") else (self.direction,)


@dataclasses.dataclass
class WriteOutcome:
    replacements: dict[str, Criterion] | None  # None: every attempt was rejected
    attempts: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)  # one per rejected attempt
    raw: list[str] = dataclasses.field(default_factory=list)  # every raw writer output, in order


@dataclasses.dataclass(frozen=True)
class WriterConfig:
    max_attempts: int = 3
    temperature: float = 0.2  # as in the RARE paper
    max_response_tokens: int = 384  # per response shown to the writer
    max_query_tokens: int = 256  # per query shown with its response (requests with `queries`)
    max_new_tokens: int = 1536
    seed: int = 0
    # String limits of the schema (bounded decoding; the prompt states them too).
    max_name_chars: int = 60
    max_check_chars: int = 300
    max_level_chars: int = 160
    max_diagnosis_chars: int = 200
    max_schema_alternatives: int = 64  # above this, the schema lets ids/polarities vary per item
