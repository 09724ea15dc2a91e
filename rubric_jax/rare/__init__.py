"""RARE's rubric writer ("RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended
Generation", sample-level criterion replacement): prompts, validation, the retry loop and two backends
(writer.py), and grammar-constrained decoding on our own model (constrained.py)."""

from rubric_jax.rare.constrained import ConstrainedOutput, constrained_decode, constrained_generate
from rubric_jax.rare.writer import (DIRECTIONS, LocalWriter, RemoteWriter, ReplacementError, WriteOutcome,
                                    WriteRequest, WriterBackend, WriterConfig, build_messages, cut_response,
                                    direction_instruction, normalise_text, replacement_grammar,
                                    replacement_schema, validate_replacements, write)

__all__ = ["DIRECTIONS", "ConstrainedOutput", "LocalWriter", "RemoteWriter", "ReplacementError", "WriteOutcome",
           "WriteRequest", "WriterBackend", "WriterConfig", "build_messages", "constrained_decode",
           "constrained_generate", "cut_response", "direction_instruction", "normalise_text",
           "replacement_grammar", "replacement_schema", "validate_replacements", "write"]
