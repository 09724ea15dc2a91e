"""A prompt's explicit constraints: parsed once, described in words, checked by a program where one can.

RLMR ("RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing", arXiv 2508.18642) needs one
pass/fail flag per rollout: does the response keep every explicit constraint of its prompt? Records carry the
constraints (`PromptRecord.constraints`, schema in `rubric_jax.data`) in three families:

  bundled kinds   word_count, line_count, must_include, must_exclude, no_commas, starts_with, ends_with
                  (a program decides), tense, point_of_view (no program can: the LLM verifier decides);
  IFEval ids      {"type": "length_constraints:number_words", "num_words": 120, "relation": "less than"}:
                  any of IFEval's 25 instruction ids, with its kwargs beside "type"; a program decides
                  (`rubric_jax.verifiers.ifeval`, strict by default, "loose": true for the loose variant);
  fuzzy           {"type": "fuzzy", "text": "Keep a melancholy tone throughout."}: the LLM verifier decides.

Every constraint may also say how it is verified, `"verify": "program" | "llm" | "both"`; without it the
run's default applies (`reward.verifier`, see `resolve_method`). "both" fails the constraint when either
verifier says it is broken.

Each constraint has a sentence (`Constraint.text`) that the LLM verifier reads: the record's own `"text"`
when it gives one, otherwise one written from the kind and its arguments.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from rubric_jax.verifiers import ifeval
from rubric_jax.verifiers.ifeval import ConstraintError
from rubric_jax.verifiers.text_units import count_words

METHODS = ("program", "llm", "both")
DEFAULTS = ("auto",) + METHODS
# kinds with a program; tense and point_of_view need reading comprehension, fuzzy is free text
PROGRAMMATIC = frozenset({"word_count", "line_count", "must_include", "must_exclude", "no_commas", "starts_with",
                          "ends_with"}) | frozenset(ifeval.INSTRUCTION_IDS)
LLM_ONLY = frozenset({"tense", "point_of_view", "fuzzy"})
KINDS = PROGRAMMATIC | LLM_ONLY

# arguments each bundled kind takes (required, optional); IFEval ids are checked by ifeval.validate_kwargs
_ARGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "word_count": ((), ("min", "max")),
    "line_count": ((), ("min", "max")),
    "must_include": (("words",), ()),
    "must_exclude": (("words",), ()),
    "no_commas": ((), ()),
    "starts_with": (("text",), ()),
    "ends_with": (("text",), ()),
    "tense": (("tense",), ()),
    "point_of_view": (("person",), ()),
    "fuzzy": (("text",), ()),
}
_RESERVED = ("type", "verify", "text", "loose")
_TENSES = ("past", "present", "future")
_PERSONS = ("first", "second", "third")


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One explicit constraint of a prompt.

    kind: the bundled kind, an IFEval instruction id, or "fuzzy"; args: its arguments (IFEval kwargs cleaned);
    text: the sentence the LLM verifier reads; verify: "program" | "llm" | "both" | "" (the run's default);
    loose: IFEval's loose variant (IFEval ids only).
    """

    kind: str
    args: tuple[tuple[str, Any], ...]
    text: str
    verify: str = ""
    loose: bool = False

    @property
    def arguments(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.args}

    @property
    def family(self) -> str:
        """The constraint type metrics are grouped by: the bundled kind, the IFEval id, or "fuzzy"."""
        return self.kind

    @property
    def programmatic(self) -> bool:
        return self.kind in PROGRAMMATIC


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _bound(args: Mapping[str, Any], key: str, where: str, kind: str) -> int | None:
    v = args.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConstraintError(f"{key!r} must be a non-negative integer, got {v!r}", where=where, instruction_id=kind)
    return v


def parse_constraint(obj: Mapping[str, Any], *, where: str = "") -> Constraint:
    """A record's constraint object -> Constraint; a ConstraintError naming `where` for anything unknown."""
    if not isinstance(obj, Mapping):
        raise ConstraintError(f"a constraint must be an object, got {type(obj).__name__}", where=where)
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConstraintError(f"unknown constraint type {kind!r}; known: the bundled kinds "
                              f"{sorted(k for k in KINDS if ':' not in k)} or an IFEval instruction id",
                              where=where)
    verify = obj.get("verify", "")
    if verify not in ("",) + METHODS:
        raise ConstraintError(f"'verify' must be one of {METHODS}, got {verify!r}", where=where, instruction_id=kind)
    if verify in ("program", "both") and kind not in PROGRAMMATIC:
        raise ConstraintError(f"verify={verify!r}, but no program checks {kind!r} (use 'llm')", where=where,
                              instruction_id=kind)
    text = obj.get("text")
    loose = obj.get("loose", False)
    if not isinstance(loose, bool) or (loose and kind not in ifeval.INSTRUCTION_IDS):
        raise ConstraintError("'loose' is a boolean for IFEval instruction ids only", where=where,
                              instruction_id=kind)
    args = {k: v for k, v in obj.items() if k not in _RESERVED}
    if kind in ifeval.INSTRUCTION_IDS:
        args = ifeval.validate_kwargs(kind, args, where=where)
    else:
        if kind in ("starts_with", "ends_with", "fuzzy"):
            args["text"] = text
        required, optional = _ARGS[kind]
        unknown = sorted(set(args) - set(required) - set(optional))
        if unknown:
            raise ConstraintError(f"unknown argument(s) {unknown}; {kind!r} takes {list(required + optional)}",
                                  where=where, instruction_id=kind)
        for k in required:
            if args.get(k) in (None, "", []):
                raise ConstraintError(f"missing argument {k!r}", where=where, instruction_id=kind)
        _check_args(kind, args, where)
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise ConstraintError("'text' must be a non-empty string", where=where, instruction_id=kind)
    frozen = tuple(sorted((k, _freeze(v)) for k, v in args.items()))
    # for starts_with / ends_with "text" is the argument, not a sentence: the sentence is always written for them
    own = text.strip() if text and kind not in ("starts_with", "ends_with") else None
    return Constraint(kind, frozen, own or describe(kind, args), verify, loose)


def _check_args(kind: str, args: dict, where: str) -> None:
    if kind in ("word_count", "line_count"):
        lo, hi = _bound(args, "min", where, kind), _bound(args, "max", where, kind)
        if lo is None and hi is None:
            raise ConstraintError("give 'min', 'max' or both", where=where, instruction_id=kind)
        if lo is not None and hi is not None and lo > hi:
            raise ConstraintError(f"min {lo} > max {hi}", where=where, instruction_id=kind)
    elif kind in ("must_include", "must_exclude"):
        words = args["words"]
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            raise ConstraintError("'words' must be a list of non-empty strings", where=where, instruction_id=kind)
    elif kind in ("starts_with", "ends_with", "fuzzy"):
        if not isinstance(args["text"], str) or not args["text"].strip():
            raise ConstraintError("'text' must be a non-empty string", where=where, instruction_id=kind)
    elif kind == "tense" and args["tense"] not in _TENSES:
        raise ConstraintError(f"'tense' must be one of {_TENSES}, got {args['tense']!r}", where=where,
                              instruction_id=kind)
    elif kind == "point_of_view" and args["person"] not in _PERSONS:
        raise ConstraintError(f"'person' must be one of {_PERSONS}, got {args['person']!r}", where=where,
                              instruction_id=kind)


def parse_constraints(objs: Sequence[Mapping[str, Any]], *, where: str = "") -> tuple[Constraint, ...]:
    """All constraints of one record; `where` (e.g. the record id) prefixes every error, with the index."""
    return tuple(parse_constraint(o, where=f"{where} constraints[{i}]".strip()) for i, o in enumerate(objs))


def _quoted(words: Sequence[str]) -> str:
    q = [f'"{w}"' for w in words]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + " and " + q[-1]


def _range(lo, hi, unit: str) -> str:
    if lo is not None and hi is not None:
        return f"exactly {lo} {unit}" if lo == hi else f"between {lo} and {hi} {unit}"
    return f"at least {lo} {unit}" if hi is None else f"at most {hi} {unit}"


def describe(kind: str, args: Mapping[str, Any]) -> str:
    """The constraint as one instruction sentence (what the LLM verifier reads when the record gives none)."""
    if kind == "word_count":
        return f"The response must be {_range(args.get('min'), args.get('max'), 'words')} long."
    if kind == "line_count":
        return f"The response must have {_range(args.get('min'), args.get('max'), 'non-empty lines')}."
    if kind == "must_include":
        return f"The response must use each of these words: {_quoted(args['words'])}."
    if kind == "must_exclude":
        return f"The response must not use any of these words: {_quoted(args['words'])}."
    if kind == "no_commas":
        return "The response must not contain a single comma."
    if kind == "starts_with":
        return f'The response must begin with exactly this text: "{args["text"]}"'
    if kind == "ends_with":
        return f'The response must end with exactly this text: "{args["text"]}"'
    if kind == "tense":
        return f"The narration must be written in the {args['tense']} tense throughout."
    if kind == "point_of_view":
        return f"The response must be written in the {args['person']} person throughout."
    if kind == "fuzzy":
        return str(args["text"])
    readable = kind.split(":", 1)[-1].replace("_", " ")
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
    return f"The response must follow the instruction '{readable}'" + (f" ({shown})." if shown else ".")


def resolve_method(c: Constraint, default: str) -> str:
    """How `c` is verified: its own "verify", else the run's default ("auto": a program where one exists, the
    LLM otherwise). A default of "program" or "both" cannot verify an LLM-only kind: that is an error."""
    if default not in DEFAULTS:
        raise ValueError(f"reward.verifier must be one of {DEFAULTS}, got {default!r}")
    if c.verify:
        return c.verify
    if default == "auto":
        return "program" if c.programmatic else "llm"
    if default in ("program", "both") and not c.programmatic:
        raise ConstraintError(f"reward.verifier={default!r}, but no program checks this kind: give the constraint "
                              f"\"verify\": \"llm\" or use reward.verifier='auto'", instruction_id=c.kind)
    return default


def _has_word(text: str, word: str) -> bool:
    """Whole-word (or whole-phrase), case-insensitive."""
    return re.search(r"(?<!\w)" + re.escape(word.strip()) + r"(?!\w)", text, flags=re.IGNORECASE) is not None


def _norm(text: str) -> str:
    return " ".join(text.split())


def check_program(c: Constraint, response: str) -> bool:
    """Whether `response` keeps constraint `c`, decided by a program (ConstraintError for LLM-only kinds).

    word_count counts words as `text_units.count_words` does (runs of word characters); line_count counts
    non-empty lines; must_include / must_exclude match whole words, case-insensitive; starts_with / ends_with
    compare after collapsing whitespace, case-sensitive, ends_with ignoring a closing punctuation mark or quote
    after the text.
    """
    a = c.arguments
    if c.kind in ifeval.INSTRUCTION_IDS:
        return ifeval.check(c.kind, a, response, loose=c.loose)
    if c.kind == "word_count":
        n = count_words(response)
        return (a.get("min") is None or n >= a["min"]) and (a.get("max") is None or n <= a["max"])
    if c.kind == "line_count":
        n = sum(1 for line in response.splitlines() if line.strip())
        return (a.get("min") is None or n >= a["min"]) and (a.get("max") is None or n <= a["max"])
    if c.kind == "must_include":
        return all(_has_word(response, w) for w in a["words"])
    if c.kind == "must_exclude":
        return not any(_has_word(response, w) for w in a["words"])
    if c.kind == "no_commas":
        return "," not in response and "\uff0c" not in response
    if c.kind == "starts_with":
        return _norm(response).startswith(_norm(a["text"]))
    if c.kind == "ends_with":
        body, want = _norm(response), _norm(a["text"])
        return body.endswith(want) or body.rstrip(".!?\"'\u201d\u2019)").endswith(want.rstrip(".!?\"'\u201d\u2019)"))
    raise ConstraintError("no program checks this kind; it is verified by the LLM", instruction_id=c.kind)


__all__ = ["Constraint", "ConstraintError", "DEFAULTS", "KINDS", "LLM_ONLY", "METHODS", "PROGRAMMATIC",
           "check_program", "describe", "parse_constraint", "parse_constraints", "resolve_method"]
