"""Validation of a rubric writer's answer, in every request mode (see writer.py for the request and the retry
loop that feeds each error back, writer_prompts.py for what each mode asks).

Source: "RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", the appendices
on sample- and task-level updates: each update keeps the id and max_points of the criterion it takes the place
of, describes every integer score, follows the configured direction, and measures something the retained
criteria do not. Per mode on top of that: a whole-rubric rewrite (revise, refine) lists every criterion once,
in rubric order, so the score columns keep their meaning; propose fills the empty slots and never restates the
query's kept criteria. In every mode a check may not restate an inactive (dropped) criterion.

The messages are fed back to the writer model, so each names the field and says what to write instead.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from rubric_jax.rare.writer_types import WriteRequest
from rubric_jax.rubrics.types import Criterion, RubricError


UPDATE_FIELDS = ("id", "polarity", "diagnosis", "name", "check", "levels")
# Keys and words of the answer format: as a whole level description they describe nothing.
FORMAT_WORDS = ("id", "polarity", "diagnosis", "name", "check", "levels", "level", "score", "positive", "negative")


class ReplacementError(ValueError):
    """A writer answer that cannot be used; the message says exactly what is wrong (it is fed back)."""


def normalise_text(text: str) -> str:
    """Lowercase, punctuation removed, whitespace collapsed: how checks are compared for duplicates."""
    no_punct = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text.lower())
    return " ".join(no_punct.split())


# Placeholders of the prompt's example answer (writer_prompts.example_update): text containing one of them
# was copied from the template, not written. Angle brackets mark them, so no answer string may contain one.
PLACEHOLDERS = {
    "diagnosis": {"replace": "the observed difference between responses, short",
                  "revise": "mastered, frontier or out of reach, and why, short",
                  "refine": "the scoring problem found and its evidence, short",
                  "propose": "the difference among the responses it measures, short"},
    "name": "short title", "check": "one observable check", "level": "what earns",
}
# A check states what to look for, and a level what a response at that score looks like: neither fits in a
# word or two ("diagnosis_type_1", "100%" are what a small writer produces when it has nothing to say).
MIN_CHECK_WORDS = 4
MIN_LEVEL_WORDS = 3


def template_phrases(mode: str, field: str) -> tuple[str, ...]:
    """The normalised placeholder texts a `field` ("diagnosis", "name", "check" or "level") of a `mode`
    answer may not open with: its own placeholder, and the diagnosis placeholder that precedes every field
    (a small writer that copied it once tends to repeat it everywhere). The local writer's grammar bans the
    same openings, so its answers pass this rule whole. (Inside a string, the brackets that mark a
    placeholder are refused anyway.)"""
    texts = {PLACEHOLDERS["diagnosis"][mode], PLACEHOLDERS[field] if field != "diagnosis" else ""} - {""}
    return tuple(sorted(normalise_text(t) for t in texts))


def _is_placeholder(text: str) -> bool:
    t = text.strip()
    return t.startswith("<") and t.endswith(">") and ">" not in t[1:-1]


def _string_problem(text: str, what: str, phrases: tuple[str, ...], min_words: int = 1) -> str | None:
    """Why an answer string cannot be used, or None."""
    if "<" in text or ">" in text:
        return (f"{text!r} contains angle brackets, which mark the template's placeholders; write plain text "
                f"for the {what}")
    key = f"{normalise_text(text)} "
    for phrase in phrases:
        if key.startswith(f"{phrase} "):
            return f"{text!r} copies the template's placeholder ({phrase!r}); write the actual {what}"
    if len(text.split()) < min_words:
        return f"{text!r} is too short: the {what} needs at least {min_words} words"
    return None


def _parse(text_or_obj: Any) -> Any:
    if not isinstance(text_or_obj, str):
        return text_or_obj
    text = text_or_obj.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.S)  # a lone code fence is tolerated
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReplacementError(f"the answer is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                               'reply with one JSON object {"updates": [...]} and nothing else') from None


def validate_replacements(text_or_obj: Any, request: WriteRequest) -> dict[str, Criterion]:
    """The accepted replacements {id: Criterion}, or ReplacementError naming the first problem found."""
    obj = _parse(text_or_obj)
    if not isinstance(obj, dict):
        raise ReplacementError(f'the answer must be a JSON object {{"updates": [...]}}, got a {type(obj).__name__}')
    updates = obj.get("updates")
    if not isinstance(updates, list):
        raise ReplacementError('the object has no "updates" list')
    b = request.count
    whole = request.mode in ("revise", "refine")
    ids = list(request.rubric.ids)
    if len(updates) != b:
        msg = f'"updates" must hold exactly {b} update(s), got {len(updates)}'
        if whole:
            present = {u.get("id") for u in updates if isinstance(u, dict) and isinstance(u.get("id"), str)}
            missing = [c for c in ids if c not in present]
            msg += (f"; missing {missing}" if missing else "")
            msg += f"; rewrite every criterion once, in the rubric's order {ids}"
        raise ReplacementError(msg)
    allowed = request.allowed_polarities()
    out: dict[str, Criterion] = {}
    first_use: dict[str, int] = {}
    polarities = []
    for k, u in enumerate(updates):
        path = f"updates[{k}]"
        if not isinstance(u, dict):
            raise ReplacementError(f"{path}: must be an object, got a {type(u).__name__}")
        for f in UPDATE_FIELDS:
            if f not in u:
                raise ReplacementError(f'{path}: missing field "{f}"')
        for f in ("id", "polarity", "diagnosis", "name", "check"):
            if not isinstance(u[f], str) or not u[f].strip():
                raise ReplacementError(f'{path}.{f}: must be a non-empty string')
            if _is_placeholder(u[f]):
                raise ReplacementError(f"{path}.{f}: {u[f]!r} is the template's placeholder; write the actual text")
        cid = u["id"]
        if whole and cid != ids[k]:
            if cid not in ids:
                what = f"{cid!r} is not a criterion of this rubric"
            elif cid in first_use:
                what = f"{cid!r} was already rewritten by updates[{first_use[cid]}]"
            else:
                what = f"{cid!r} is out of order"
            raise ReplacementError(f"{path}.id: {what}; update {k} must rewrite {ids[k]!r} (criterion {k + 1} of "
                                   f"{len(ids)}): rewrite every criterion once, in the rubric's order {ids}")
        if request.mode == "propose" and cid not in request.eligible:
            why = ("a kept criterion (initial requirement or active pool)" if cid in ids
                   else "not one of the empty slots")
            raise ReplacementError(f"{path}.id: {cid!r} is {why}; fill the empty slots {list(request.eligible)}, "
                                   "in that order")
        if cid not in request.eligible:
            why = "a retained criterion" if cid in request.rubric.ids else "not a criterion of this rubric"
            raise ReplacementError(f"{path}.id: {cid!r} is {why}; replace one of the saturated criteria "
                                   f"{list(request.eligible)}")
        if cid in first_use:
            if request.mode == "propose":
                raise ReplacementError(f"{path}.id: the slot {cid!r} is already filled by updates[{first_use[cid]}]; "
                                       f"fill each slot once, in the order {list(request.eligible)}")
            raise ReplacementError(f"{path}.id: {cid!r} is already replaced by updates[{first_use[cid]}]; "
                                   "each saturated criterion is replaced at most once")
        first_use[cid] = k
        pol = u["polarity"]
        if pol not in allowed:
            raise ReplacementError(f"{path}.polarity: {pol!r} is not allowed; the {request.direction} direction "
                                   f"requires {' or '.join(repr(p) for p in allowed)}")
        polarities.append(pol)
        for f in ("diagnosis", "name", "check"):
            why = _string_problem(u[f], f, template_phrases(request.mode, f), MIN_CHECK_WORDS if f == "check" else 1)
            if why:
                raise ReplacementError(f"{path}.{f}: {why}")
        if normalise_text(u["check"]) == normalise_text(u["name"]):
            raise ReplacementError(f"{path}.check: repeats the criterion's name; the check says what to look for")
        old = request.rubric[cid]
        m = old.max_points
        if "max_points" in u and (not isinstance(u["max_points"], int) or isinstance(u["max_points"], bool)
                                  or u["max_points"] != m):
            raise ReplacementError(f"{path}.max_points: must stay {m} (the max of {cid!r}), got {u['max_points']!r}")
        levels = u["levels"]
        if not isinstance(levels, list) or len(levels) != m + 1:
            got = f"{len(levels)} entries" if isinstance(levels, list) else f"a {type(levels).__name__}"
            raise ReplacementError(f"{path}.levels: must list exactly {m + 1} descriptions, one per score 0..{m} "
                                   f"(max_points of {cid!r} is {m}), got {got}")
        seen_levels: dict[str, int] = {}
        for j, lv in enumerate(levels):
            if not isinstance(lv, str) or not lv.strip():
                raise ReplacementError(f"{path}.levels[{j}]: the description of score {j} must be a non-empty string")
            if _is_placeholder(lv):
                raise ReplacementError(f"{path}.levels[{j}]: {lv!r} is the template's placeholder; describe what "
                                       f"earns score {j}")
            key = normalise_text(lv)
            why = None if key in FORMAT_WORDS else _string_problem(
                lv, f"description of score {j}", template_phrases(request.mode, "level"), MIN_LEVEL_WORDS)
            if why:
                raise ReplacementError(f"{path}.levels[{j}]: {why}")
            if key in FORMAT_WORDS:
                raise ReplacementError(f"{path}.levels[{j}]: {lv!r} is a key of the answer format; describe what "
                                       f"earns score {j}")
            if key in (normalise_text(u["check"]), normalise_text(u["name"])):
                raise ReplacementError(f"{path}.levels[{j}]: repeats the criterion's name or check; describe what "
                                       f"earns score {j}")
            if key in seen_levels:
                raise ReplacementError(f"{path}.levels[{j}]: repeats levels[{seen_levels[key]}]; each score needs its "
                                       "own description")
            seen_levels[key] = j
        if normalise_text(u["check"]) == normalise_text(old.check):
            if request.mode == "propose":
                raise ReplacementError(f"{path}.check: copies the empty slot's placeholder text; write a real check")
            if whole:
                how = "move its scoring boundary" if request.mode == "revise" else "merge a refinement into it"
                raise ReplacementError(f"{path}.check: restates the current check of {cid!r} unchanged; rewrite it "
                                       f"({how})")
            raise ReplacementError(f"{path}.check: restates the criterion it replaces ({cid!r}); write a new check")
        try:
            out[cid] = Criterion(id=cid, name=u["name"].strip(), check=u["check"].strip(),
                                 levels=tuple(lv.strip() for lv in levels), max_points=m, polarity=pol,
                                 scoring="levels")
        except RubricError as e:
            raise ReplacementError(f"{path}: {e}") from None
    if request.direction == "mixed" and b >= 2 and len(set(polarities)) < 2:
        raise ReplacementError(f"the mixed direction with {b} updates needs both polarities (at least one "
                               f"positive and one negative); all updates are {polarities[0]!r}")
    retained = {normalise_text(c.check): c.id for c in request.retained}
    inactive = {normalise_text(c.check): c.id for c in request.inactive}
    kept = "kept criterion" if request.mode == "propose" else "retained criterion"
    seen: dict[str, int] = {}
    for k, u in enumerate(updates):
        key = normalise_text(u["check"])
        if key in retained:
            raise ReplacementError(f"updates[{k}].check: duplicates the check of the {kept} "
                                   f"{retained[key]!r}; measure something different")
        if key in inactive:
            raise ReplacementError(f"updates[{k}].check: restates {inactive[key]!r}, a criterion already tried and "
                                   "dropped; measure something different")
        if key in seen:
            raise ReplacementError(f"updates[{k}].check: duplicates the check of updates[{seen[key]}]; each update "
                                   "must measure something different")
        seen[key] = k
    try:
        request.rubric.replace_criteria(out)
    except RubricError as e:
        raise ReplacementError(f"the revised rubric is invalid: {e}") from None
    return out


