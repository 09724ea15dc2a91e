"""Rule-based verifiers: deterministic pass/fail checks of a response.

``ifeval`` holds IFEval's 25 instruction checkers (strict and loose), the
hard-constraint half of RLMR's reward.
"""

from rubric_jax.verifiers.ifeval import (
    INSTRUCTION_IDS,
    LANGUAGE_CODES,
    ConstraintError,
    check,
    follow_instructions,
    validate_kwargs,
)

__all__ = [
    "INSTRUCTION_IDS",
    "LANGUAGE_CODES",
    "ConstraintError",
    "check",
    "follow_instructions",
    "validate_kwargs",
]
