"""Constraint verifiers: pass/fail checks of a response, the hard-constraint half of RLMR's reward.

``ifeval`` holds IFEval's 25 instruction checkers (strict and loose); ``constraints`` parses a prompt's
constraints, describes each in a sentence and checks the countable ones by program; ``verifier`` combines
programs with the LLM verifier (``rubric_jax.judge.verify``) into one flag per rollout.
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
