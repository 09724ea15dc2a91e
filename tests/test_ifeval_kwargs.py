"""IFEval's instruction checkers refuse malformed kwargs with an error naming the place and the instruction
(rubric_jax.verifiers.ifeval's validation; the checkers' verdicts against lm-eval are in
test_ifeval_checkers.py)."""

from __future__ import annotations

import pytest

from rubric_jax.verifiers import ConstraintError, check, follow_instructions, validate_kwargs

LESS = "less than"


def test_unknown_instruction_id_names_place_and_id():
    with pytest.raises(ConstraintError, match=r"^ifeval\.jsonl line 12: keywords:nope: unknown instruction id") as info:
        check("keywords:nope", {}, "text", where="ifeval.jsonl line 12")
    assert isinstance(info.value, ValueError)
    assert info.value.where == "ifeval.jsonl line 12" and info.value.instruction_id == "keywords:nope"


@pytest.mark.parametrize("iid, kwargs, message", [
    ("length_constraints:number_words", {"num_words": 10}, r"missing kwarg\(s\) \['relation'\]"),
    ("length_constraints:number_words", {"num_words": 0, "relation": LESS}, r"missing kwarg\(s\) \['num_words'\]"),
    ("length_constraints:number_words", {"num_words": "10", "relation": LESS}, "must be an integer"),
    ("length_constraints:number_words", {"num_words": True, "relation": LESS}, "must be an integer"),
    ("length_constraints:number_words", {"num_words": 2.5, "relation": LESS}, "must be an integer"),
    ("length_constraints:number_words", {"num_words": -3, "relation": LESS}, "must be >= 0"),
    ("length_constraints:number_words", {"num_words": 10, "relation": "at most"}, "must be one of"),
    ("length_constraints:number_words", {"num_words": 10, "relation": LESS, "keyword": "x"},
     r"unknown kwarg\(s\) \['keyword'\]"),
    ("keywords:existence", {"keywords": "ocean"}, "must be a list of strings"),
    ("keywords:existence", {"keywords": ["(unclosed"]}, "not a valid regular expression"),
    ("keywords:letter_frequency", {"letter": "ab", "let_frequency": 2, "let_relation": LESS}, "one letter a-z"),
    ("language:response_language", {"language": "xx"}, "must be one of"),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"},
     "between 1 and num_paragraphs"),
    ("combination:repeat_prompt", {"prompt_to_repeat": None},
     "prompt_to_repeat: the request the response must first repeat"),
    ("detectable_format:multiple_sections", {"section_spliter": "(", "num_sections": 2},
     "not a valid regular expression"),
    ("punctuation:no_comma", ["not", "a", "mapping"], "kwargs must be a mapping"),
])
def test_bad_kwargs_raise_constraint_error(iid, kwargs, message):
    with pytest.raises(ConstraintError, match=message) as info:
        validate_kwargs(iid, kwargs, where="data.jsonl line 7")
    assert str(info.value).startswith(f"data.jsonl line 7: {iid}: ")
    with pytest.raises(ConstraintError):
        check(iid, kwargs, "some response", where="data.jsonl line 7")


def test_validate_kwargs_cleans_like_ifeval():
    raw = {"num_words": 10.0, "relation": LESS, "keywords": None, "language": "", "num_sentences": 0}
    assert validate_kwargs("length_constraints:number_words", raw) == {"num_words": 10, "relation": LESS}
    assert validate_kwargs("punctuation:no_comma", None) == {}
    assert validate_kwargs("keywords:existence", {"keywords": ("a", "b")}) == {"keywords": ["a", "b"]}


def test_follow_instructions_checks_lengths_and_order():
    ids = ["punctuation:no_comma", "startend:quotation"]
    assert follow_instructions(ids, [{}, None], '"no commas"') == [True, True]
    assert follow_instructions(ids, [{}, {}], "a, b") == [False, False]
    with pytest.raises(ConstraintError, match="2 instruction ids but 1 kwargs"):
        follow_instructions(ids, [{}], "x")


def test_language_verdicts_are_deterministic():
    text = "Ciao, come stai? Bene grazie, e tu? Sto bene."
    first = [check("language:response_language", {"language": "it"}, text) for _ in range(5)]
    assert len(set(first)) == 1
