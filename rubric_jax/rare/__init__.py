"""RARE ("RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation"):
integer rubric scores with a retry, from our own model or an OpenAI-compatible judge (scoring.py, over
rubric_jax.judge's Judge or RemoteJudge); each query's rubric and its revisions (store.py); the sample-level step
(sample_level.py); task-level revision: the rules (task_level.py) and the run's evidence, request,
rescoring and decision (task_revision.py, also the MPO baseline); the RLER baseline's per-query pools
(rler.py); the criterion writer: prompts (writer_prompts.py), validation (validate.py), the retry loop and
two backends (writer.py); and grammar-constrained decoding on our own model (constrained.py). The trainer's
side is rubric_jax/methods/rare.py; the math, docs/method.md §3."""

from rubric_jax.rare.constrained import ConstrainedOutput, constrained_decode, constrained_generate
from rubric_jax.rare.writer import (DIRECTIONS, LocalWriter, RemoteWriter, ReplacementError, WriteOutcome,
                                    WriteRequest, WriterBackend, WriterConfig, build_messages, cut_response,
                                    direction_instruction, normalise_text, replacement_grammar,
                                    replacement_schema, validate_replacements, write)

__all__ = ["DIRECTIONS", "ConstrainedOutput", "LocalWriter", "RemoteWriter", "ReplacementError", "WriteOutcome",
           "WriteRequest", "WriterBackend", "WriterConfig", "build_messages", "constrained_decode",
           "constrained_generate", "cut_response", "direction_instruction", "normalise_text",
           "replacement_grammar", "replacement_schema", "validate_replacements", "write"]
