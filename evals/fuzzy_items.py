"""Hand-labelled fuzzy-constraint items for measuring an LLM constraint verifier.

What the set is for. RLMR ("RLMR: Reinforcement Learning with Mixed Rewards for Creative Writing",
arXiv 2508.18642) mixes a writing-quality reward with a constraint verifier. Constraints a program can check
(word counts, keywords, JSON) go to rule-based checkers (`rubric_jax.verifiers`); constraints no program can
check ("keep a melancholy tone", "suitable for young children") go to an LLM judge, and the paper never
reports how accurate that judge is. This set is the measurement: each item is a writing task, a response to
it, one fuzzy constraint and a gold pass/fail label, so a verifier's verdicts can be scored for precision and
recall (per constraint type, with "fail" as the positive class for catching violations, or "pass" for
acceptance) against a human reference.

How it was built. Every item was written by hand for this project (no text copied from any dataset): 144
items, 12 constraint types (`TYPES`) with 12 items each, 6 passing and 6 failing. Responses are 40-160
words of plain text (stories, poems, letters, product blurbs, health answers, scene descriptions) and all of
them answer their prompt competently, so a verifier cannot score well by spotting bad writing: a failing
response misses only the constraint (a "melancholy" story that turns cheerful, a past-tense story that
slides into the present, one spoken line in a "no dialogue" scene, a melatonin dose in a "no dosage"
answer). About a quarter of the items are hard cases in either direction (present-tense verbs only inside
quoted dialogue: pass; the word "brave" in a story about luck: fail); their `note` starts with "Hard case:".
Every `note` says in one line why the label holds. Pass and fail responses have similar lengths.

File format (`evals/data/fuzzy_constraints.jsonl`), one JSON object per line:
``{"id", "type", "constraint", "prompt", "response", "label": "pass"|"fail", "note"}``, all non-empty strings.
`load_fuzzy_items` rejects anything else with an error naming file:line. Summary: `python -m evals.fuzzy_items`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fuzzy_constraints.jsonl")

TYPES = ("tone", "tense", "point_of_view", "register", "audience", "no_dialogue", "ending", "sensory", "theme",
         "persona", "safety_advice", "structure")

FIELDS = ("id", "type", "constraint", "prompt", "response", "label", "note")
LABELS = {"pass": True, "fail": False}


class FuzzyItemsError(ValueError):
    """A malformed items file; the message starts with `path:line:`."""


@dataclasses.dataclass(frozen=True)
class FuzzyItem:
    id: str
    type: str
    constraint: str
    prompt: str
    response: str
    passes: bool
    note: str

    @property
    def label(self) -> str:
        return "pass" if self.passes else "fail"


def _parse_line(text: str, where: str) -> FuzzyItem:
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        raise FuzzyItemsError(f"{where}: malformed JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(rec, dict):
        raise FuzzyItemsError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    unknown = sorted(set(rec) - set(FIELDS))
    if unknown:
        raise FuzzyItemsError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; expected {FIELDS}")
    for name in FIELDS:
        if name not in rec:
            raise FuzzyItemsError(f"{where}: missing field {name!r}")
        value = rec[name]
        if not isinstance(value, str):
            raise FuzzyItemsError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            raise FuzzyItemsError(f"{where}: field {name!r} is empty")
    if rec["label"] not in LABELS:
        raise FuzzyItemsError(f"{where}: label must be 'pass' or 'fail', got {rec['label']!r}")
    return FuzzyItem(id=rec["id"], type=rec["type"], constraint=rec["constraint"], prompt=rec["prompt"],
                     response=rec["response"], passes=LABELS[rec["label"]], note=rec["note"])


def load_fuzzy_items(path: str | os.PathLike | None = None) -> list[FuzzyItem]:
    """Items of a fuzzy-constraints JSONL file (default: the bundled set), in file order.

    Blank lines are skipped. Raises FuzzyItemsError naming file:line for malformed JSON, a non-object line, a
    missing, empty, non-string or unknown field, a label other than pass/fail, or an id seen on an earlier line.
    """
    path = os.fspath(DEFAULT_PATH if path is None else path)
    items: list[FuzzyItem] = []
    first_line: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, start=1):
            if not text.strip():
                continue
            where = f"{path}:{lineno}"
            item = _parse_line(text, where)
            if item.id in first_line:
                raise FuzzyItemsError(f"{where}: duplicate id {item.id!r} (first used on line {first_line[item.id]})")
            first_line[item.id] = lineno
            items.append(item)
    return items


def summary(items: Iterable[FuzzyItem]) -> dict:
    """Counts per type and label: {"total", "pass", "fail", "by_type": {type: {"total", "pass", "fail"}}}.

    Types appear in `TYPES` order, then any others in order of first appearance.
    """
    items = list(items)
    seen = list(dict.fromkeys(it.type for it in items))
    order = [t for t in TYPES if t in seen] + [t for t in seen if t not in TYPES]
    by_type = {t: {"total": 0, "pass": 0, "fail": 0} for t in order}
    for it in items:
        by_type[it.type]["total"] += 1
        by_type[it.type][it.label] += 1
    n_pass = sum(it.passes for it in items)
    return {"total": len(items), "pass": n_pass, "fail": len(items) - n_pass, "by_type": by_type}


def format_summary(s: dict) -> str:
    lines = [f"{'type':<15} {'pass':>5} {'fail':>5} {'total':>6}"]
    for t, c in s["by_type"].items():
        lines.append(f"{t:<15} {c['pass']:>5} {c['fail']:>5} {c['total']:>6}")
    lines.append(f"{'all':<15} {s['pass']:>5} {s['fail']:>5} {s['total']:>6}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(format_summary(summary(load_fuzzy_items(sys.argv[1] if len(sys.argv) > 1 else None))))
