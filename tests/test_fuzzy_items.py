"""The bundled fuzzy-constraint set (evals/data/fuzzy_constraints.jsonl) and its loader (evals.fuzzy_items)."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re

import pytest

from evals.fuzzy_items import (
    DEFAULT_PATH,
    FIELDS,
    TYPES,
    FuzzyItem,
    FuzzyItemsError,
    format_summary,
    load_fuzzy_items,
    summary,
)


@pytest.fixture(scope="module")
def items() -> list[FuzzyItem]:
    return load_fuzzy_items()


def _words(text: str) -> int:
    return len(re.findall(r"\S+", text))


# ---------------------------------------------------------------- the bundled set


def test_bundled_file_loads(items):
    assert os.path.isfile(DEFAULT_PATH)
    assert DEFAULT_PATH.endswith(os.path.join("evals", "data", "fuzzy_constraints.jsonl"))
    assert items and all(isinstance(it, FuzzyItem) for it in items)
    assert load_fuzzy_items(DEFAULT_PATH) == items  # explicit path, same result


def test_at_least_140_items(items):
    assert len(items) >= 140, len(items)


def test_types_are_exactly_the_declared_types(items):
    assert sorted({it.type for it in items}) == sorted(TYPES)


@pytest.mark.parametrize("kind", TYPES)
def test_each_type_has_12_items_and_balanced_labels(items, kind):
    labels = collections.Counter(it.label for it in items if it.type == kind)
    n = sum(labels.values())
    assert n >= 12, f"{kind}: only {n} items"
    assert labels["pass"] and labels["fail"], f"{kind}: {dict(labels)}"
    minority = min(labels["pass"], labels["fail"])
    assert minority / n >= 0.4, f"{kind}: labels {dict(labels)} are unbalanced"


def test_ids_unique_and_well_formed(items):
    ids = [it.id for it in items]
    dupes = [i for i, c in collections.Counter(ids).items() if c > 1]
    assert not dupes, dupes
    bad = [i for i in ids if not re.fullmatch(r"fz-\d{3}", i)]
    assert not bad, bad


def test_response_word_counts_in_range(items):
    bad = [(it.id, _words(it.response)) for it in items if not 30 <= _words(it.response) <= 200]
    assert not bad, bad


def test_prompts_and_responses_are_not_repeated(items):
    for field in ("prompt", "response"):
        counts = collections.Counter(getattr(it, field) for it in items)
        repeated = [t[:60] for t, c in counts.items() if c > 1]
        assert not repeated, (field, repeated)


def test_constraints_are_single_instructions(items):
    # One sentence each: ends with a full stop and has no sentence break inside.
    bad = [(it.id, it.constraint) for it in items
           if not it.constraint.endswith(".") or re.search(r"[.!?]\s+[A-Z]", it.constraint)]
    assert not bad, bad


def test_responses_have_no_markdown_headings(items):
    bad = [it.id for it in items if re.search(r"(?m)^\s*#{1,6}\s", it.response)]
    assert not bad, bad


def test_notes_are_one_short_line(items):
    bad = [(it.id, len(it.note)) for it in items if "\n" in it.note or len(it.note) > 200]
    assert not bad, bad


def test_summary_counts(items):
    s = summary(items)
    assert s["total"] == len(items)
    assert s["pass"] + s["fail"] == len(items)
    assert s["pass"] == sum(it.passes for it in items)
    assert list(s["by_type"]) == list(TYPES)
    for kind, c in s["by_type"].items():
        assert c["total"] == c["pass"] + c["fail"] == sum(it.type == kind for it in items)
        assert c["pass"] == sum(it.type == kind and it.passes for it in items)
    table = format_summary(s)
    assert table.splitlines()[-1].split() == ["all", str(s["pass"]), str(s["fail"]), str(s["total"])]


def test_summary_of_nothing_and_of_unknown_types():
    assert summary([]) == {"total": 0, "pass": 0, "fail": 0, "by_type": {}}
    extra = FuzzyItem("x-1", "zzz_new", "c.", "p", "r", False, "n")
    tone = FuzzyItem("x-2", "tone", "c.", "p", "r", True, "n")
    s = summary([extra, tone])
    assert list(s["by_type"]) == ["tone", "zzz_new"]
    assert s["by_type"]["zzz_new"] == {"total": 1, "pass": 0, "fail": 1}


def test_item_is_frozen_and_label_round_trips(items):
    it = items[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        it.passes = not it.passes  # type: ignore[misc]
    assert {x.label for x in items} == {"pass", "fail"}
    raw = [json.loads(line) for line in open(DEFAULT_PATH, encoding="utf-8") if line.strip()]
    assert [r["label"] for r in raw] == [x.label for x in items]
    assert [r["label"] == "pass" for r in raw] == [x.passes for x in items]


# ---------------------------------------------------------------- the loader on bad input


def _good(i: int, **over) -> str:
    rec = {"id": f"t-{i}", "type": "tone", "constraint": "Keep a solemn tone.", "prompt": "Write a speech.",
           "response": "Some words here.", "label": "pass", "note": "Why."}
    rec.update(over)
    return json.dumps(rec)


def _missing(field: str) -> str:
    rec = json.loads(_good(3))
    del rec[field]
    return json.dumps(rec)


# Each bad line goes on line 4 of the file, after two good items and a blank line.
BAD = {
    "malformed_json": ('{"id": "t-3", "type": "tone",', "malformed JSON"),
    "not_an_object": ('["t-3", "tone"]', "expected a JSON object"),
    "missing_field": (_missing("response"), "missing field 'response'"),
    "missing_label": (_missing("label"), "missing field 'label'"),
    "empty_field": (_good(3, note=""), "field 'note' is empty"),
    "blank_field": (_good(3, constraint="   "), "field 'constraint' is empty"),
    "non_string_field": (_good(3, id=3), "field 'id' must be a string"),
    "unknown_field": (_good(3, lable="pass"), "unknown field(s) 'lable'"),
    "bad_label": (_good(3, label="yes"), "label must be 'pass' or 'fail', got 'yes'"),
    "uppercase_label": (_good(3, label="PASS"), "label must be 'pass' or 'fail', got 'PASS'"),
    "duplicate_id": (_good(3, id="t-1"), "duplicate id 't-1' (first used on line 1)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_loader_names_file_and_line(tmp_path, case):
    line, message = BAD[case]
    path = tmp_path / f"{case}.jsonl"
    path.write_text("\n".join([_good(1), _good(2), "", line, _good(5)]) + "\n", encoding="utf-8")
    with pytest.raises(FuzzyItemsError) as exc:
        load_fuzzy_items(path)
    text = str(exc.value)
    assert text.startswith(f"{path}:4: "), text
    assert message in text, text


def test_loader_accepts_good_file_and_skips_blank_lines(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text("\n" + _good(1) + "\n\n" + _good(2, label="fail") + "\n", encoding="utf-8")
    got = load_fuzzy_items(str(path))
    assert [(it.id, it.passes, it.label) for it in got] == [("t-1", True, "pass"), ("t-2", False, "fail")]
    assert got[0] == FuzzyItem("t-1", "tone", "Keep a solemn tone.", "Write a speech.", "Some words here.", True,
                               "Why.")


def test_fields_match_file_format():
    assert FIELDS == ("id", "type", "constraint", "prompt", "response", "label", "note")
    assert [f.name for f in dataclasses.fields(FuzzyItem)] == ["id", "type", "constraint", "prompt", "response",
                                                               "passes", "note"]
