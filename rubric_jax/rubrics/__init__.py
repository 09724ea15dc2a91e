"""Rubric types, built-in rubrics (rubrics/builtin/*.json) and their JSON loading."""

from rubric_jax.rubrics.types import (
    POLARITIES,
    SCORINGS,
    Criterion,
    Rubric,
    RubricError,
    builtin_rubric_names,
    load_rubric,
    save_rubric,
)

__all__ = [
    "POLARITIES",
    "SCORINGS",
    "Criterion",
    "Rubric",
    "RubricError",
    "builtin_rubric_names",
    "load_rubric",
    "save_rubric",
]
