"""Prompt data: JSONL prompt sets, two bundled sets, and the grain pipeline that feeds the trainer.

JSONL schema
------------
One JSON object per line; blank lines are skipped. Keys:

``prompt``       (required) non-empty string: the user turn the policy answers.
``id``           string, unique within the file; default ``"<file stem>-<line number>"``.
``task``         string naming the domain, e.g. ``"creative_writing"`` or ``"health"``.
``rubric``       a sample-level rubric (used by RARE): the name of a built-in rubric
                 (``rubric_jax.rubrics.builtin_rubric_names()``) or a path, or an inline rubric object
                 in the JSON form of `rubric_jax.rubrics.Rubric` (validated on load).
``constraints``  list of objects, each with a non-empty string ``"type"``: the prompt's explicit,
                 checkable constraints for the RLMR verifier. Only the ``type`` is validated here; the
                 bundled sets use::

                   {"type": "word_count", "min": 150, "max": 300}      inclusive word range (either bound optional)
                   {"type": "line_count", "min": 14, "max": 14}        lines of verse (non-empty lines)
                   {"type": "must_include", "words": ["salt", ...]}    each word appears (case-insensitive)
                   {"type": "must_exclude", "words": ["love", ...]}    none of the words appears
                   {"type": "no_commas"}                               no "," anywhere
                   {"type": "point_of_view", "person": "first"}       "first" | "second" | "third"
                   {"type": "tense", "tense": "present"}              "present" | "past"
                   {"type": "starts_with", "text": "..."}             the response begins with this text
                   {"type": "ends_with", "text": "..."}               the response ends with this text

                 and may also use any IFEval instruction, ``{"type": "<instruction id>", <its kwargs>}`` (e.g.
                 ``{"type": "length_constraints:number_words", "num_words": 120, "relation": "less than"}``),
                 or a free-text ``{"type": "fuzzy", "text": "Keep a melancholy tone."}``. Optional on any:
                 ``"text"`` (the sentence the LLM verifier reads), ``"verify"`` (``program`` | ``llm`` |
                 ``both``). They are checked in full when an RLMR run starts (`rubric_jax.verifiers.constraints`).

``system``       string: a system message to put before the prompt.
``meta``         object: free-form extra information (form, genre, category, ...); never read by training.

Any other top-level key is an error. Every error is a `DataError` (a ValueError) whose message starts
with ``<file>:<line>:`` and says what is wrong: malformed JSON, a missing or empty prompt, a wrong type,
a duplicate id, an unknown key.

Bundled sets (written for this project): ``load_jsonl("creative_writing")`` (200 creative-writing prompts:
stories, scenes, poems, monologues, letters, across genres; some with checkable constraints),
``load_jsonl("health")`` (101 consumer health questions with a ``meta.category``; questions only, no answers),
and the short-video script requests used by RARE, ``load_jsonl("scripts")`` (96 training requests, 32 per
video type) and ``load_jsonl("scripts_test")`` (18 held-out requests, 6 per type, with different premises).
Each script request states pre-production intent (premise, tone, audience, visual style, length or shot
limits) and leaves out the ending, character names and timestamps. Its ``task`` is ``"script_2d_animation"``,
``"script_3d_stop_motion"`` or ``"script_live_action"``, which is also the name of that type's shared
six-criterion rubric (the task-level rubric); ``meta`` holds ``video_type`` (``"2d_animation"``,
``"3d_stop_motion"`` or ``"live_action"``) and ``split`` (``"train"`` or ``"test"``). ``rubric`` is the request's
own inline rubric (the sample-level rubric): 5 to 8 binary criteria (scored 0 or ``max_points``), mixing checks
specific to the request with general script quality, and always exactly one content-density criterion (its id
contains ``density``).
"""

from rubric_jax.data.jsonl import (
    BUNDLED,
    DataError,
    PromptRecord,
    load_jsonl,
    parse_jsonl,
    parse_record,
)
from rubric_jax.data.pipeline import PromptDataset, PromptIterator

__all__ = [
    "BUNDLED",
    "DataError",
    "PromptDataset",
    "PromptIterator",
    "PromptRecord",
    "load_jsonl",
    "parse_jsonl",
    "parse_record",
]
