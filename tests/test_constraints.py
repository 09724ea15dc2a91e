"""Constraint parsing, descriptions, programmatic checks and the verifier's method choice (RLMR's verifier)."""

import numpy as np
import pytest

from rubric_jax.data import load_jsonl
from rubric_jax.verifiers import ifeval
from rubric_jax.verifiers.constraints import (Constraint, ConstraintError, check_program, describe, parse_constraint,
                                              parse_constraints, resolve_method)
from rubric_jax.verifiers.verifier import ConstraintVerifier

STORY = "Afterwards nobody could agree on how it began. The copper kettle sang; salt hung in the air. It ended, yet"


def ok(obj, text):
    return check_program(parse_constraint(obj), text)


# ---- programmatic checks, by hand --------------------------------------------------------------


def test_word_and_line_counts():
    assert ok({"type": "word_count", "min": 3, "max": 5}, "one two three")
    assert not ok({"type": "word_count", "min": 3, "max": 5}, "one two")
    assert not ok({"type": "word_count", "max": 5}, "a b c d e f")
    assert ok({"type": "word_count", "min": 2}, "a b c d e f")
    assert ok({"type": "line_count", "min": 2, "max": 2}, "first line\n\n  \nsecond line\n")
    assert not ok({"type": "line_count", "min": 3, "max": 3}, "first line\nsecond line")


def test_words_included_and_excluded_match_whole_words_case_insensitively():
    inc = {"type": "must_include", "words": ["copper", "salt"]}
    assert ok(inc, STORY) and not ok(inc, "Copper only.")
    assert ok({"type": "must_include", "words": ["COPPER"]}, STORY)
    exc = {"type": "must_exclude", "words": ["dark", "darkness"]}
    assert ok(exc, "The darker hall was quiet.")  # "darker" is another word
    assert not ok(exc, "Into the Darkness we went.")


def test_commas_openings_and_endings():
    assert ok({"type": "no_commas"}, "No comma here.") and not ok({"type": "no_commas"}, STORY.replace(";", ","))
    assert ok({"type": "starts_with", "text": "Afterwards nobody could agree on how it began."}, "  " + STORY)
    assert not ok({"type": "starts_with", "text": "Afterwards nobody agreed."}, STORY)
    assert ok({"type": "ends_with", "text": "yet"}, STORY) and ok({"type": "ends_with", "text": "yet"}, STORY + ".\n")
    assert not ok({"type": "ends_with", "text": "yet"}, STORY + " again")


def test_ifeval_ids_are_checked_by_the_ifeval_checkers_strict_and_loose():
    obj = {"type": "detectable_format:title"}
    assert ok(obj, "<<Rain>>\nIt fell.") and not ok(obj, "Rain\nIt fell.")
    # loose: the first line removed (a preamble) lets the response pass where strict fails
    starts = {"type": "startend:end_checker", "end_phrase": "Is there anything else I can help with?"}
    text = "Answer.\nIs there anything else I can help with?\n**"
    assert not ok(starts, text)
    assert ok(dict(starts, loose=True), text) and ifeval.check(starts["type"], {"end_phrase": starts["end_phrase"]},
                                                              text, loose=True)


# ---- parsing -----------------------------------------------------------------------------------


def test_descriptions_state_the_constraint():
    assert parse_constraint({"type": "word_count", "min": 400, "max": 600}).text == \
        "The response must be between 400 and 600 words long."
    assert parse_constraint({"type": "line_count", "min": 14, "max": 14}).text == \
        "The response must have exactly 14 non-empty lines."
    assert '"copper" and "salt"' in parse_constraint({"type": "must_include", "words": ["copper", "salt"]}).text
    assert "past tense" in parse_constraint({"type": "tense", "tense": "past"}).text
    # a record's own sentence wins; fuzzy constraints are their sentence
    assert parse_constraint({"type": "tense", "tense": "past", "text": "Tell it as memory."}).text == \
        "Tell it as memory."
    assert parse_constraint({"type": "fuzzy", "text": "Keep a melancholy tone."}).text == "Keep a melancholy tone."
    assert describe("no_commas", {}) == "The response must not contain a single comma."
    # for openings and endings "text" is the argument: the verifier still reads a sentence about it
    assert parse_constraint({"type": "ends_with", "text": "yet"}).text == 'The response must end with exactly this text: "yet"'



@pytest.mark.parametrize("obj,match", [
    ({"type": "haiku"}, "unknown constraint type 'haiku'"),
    ({"type": "word_count"}, "give 'min', 'max' or both"),
    ({"type": "word_count", "min": 10, "max": 5}, "min 10 > max 5"),
    ({"type": "word_count", "min": -1}, "non-negative integer"),
    ({"type": "must_include", "words": "salt"}, "list of non-empty strings"),
    ({"type": "must_include"}, "missing argument 'words'"),
    ({"type": "tense", "tense": "pluperfect"}, "must be one of"),
    ({"type": "point_of_view", "person": "fourth"}, "must be one of"),
    ({"type": "no_commas", "strict": True}, "unknown argument"),
    ({"type": "tense", "tense": "past", "verify": "program"}, "no program checks 'tense'"),
    ({"type": "no_commas", "verify": "maybe"}, "'verify' must be one of"),
    ({"type": "no_commas", "loose": True}, "'loose' is a boolean for IFEval"),
    ({"type": "fuzzy"}, "missing argument 'text'"),
    ({"type": "length_constraints:number_words", "num_words": 10}, "relation"),
])
def test_bad_constraints_are_named(obj, match):
    with pytest.raises(ConstraintError, match=match) as e:
        parse_constraints([{"type": "no_commas"}, obj], where="record 'cw-9'")
    assert str(e.value).startswith("record 'cw-9' constraints[1]")


def test_every_bundled_constraint_parses_and_programs_run_on_text():
    records = [r for r in load_jsonl("creative_writing") if r.constraints]
    assert len(records) > 50
    kinds = set()
    for r in records:
        for c in parse_constraints(r.constraints, where=r.id):
            kinds.add(c.kind)
            if c.programmatic:
                assert check_program(c, STORY) in (True, False)
    assert {"word_count", "tense", "must_exclude", "must_include", "point_of_view", "no_commas", "line_count",
            "starts_with", "ends_with"} <= kinds


def test_method_resolution():
    prog, llm = parse_constraint({"type": "no_commas"}), parse_constraint({"type": "tense", "tense": "past"})
    assert (resolve_method(prog, "auto"), resolve_method(llm, "auto")) == ("program", "llm")
    assert resolve_method(prog, "llm") == "llm" and resolve_method(prog, "both") == "both"
    assert resolve_method(parse_constraint({"type": "no_commas", "verify": "llm"}), "program") == "llm"
    with pytest.raises(ConstraintError, match="no program checks"):
        resolve_method(llm, "program")
    with pytest.raises(ValueError, match="reward.verifier"):
        resolve_method(prog, "sometimes")


# ---- the verifier: programs and a scripted LLM ------------------------------------------------


def test_verifier_combines_programs_and_llm():
    """Program verdicts per response; the LLM's p_pass thresholded at 1/2; "both" fails when either fails;
    a rollout violates when any constraint fails."""
    from types import SimpleNamespace

    calls = []

    class ScriptedJudge:  # the verify_batch of the Verdicts protocol, scripted
        def verify_batch(self, prompts, responses, constraints, mode=None):
            calls.append(constraints)
            # p_pass: 0.9 for responses mentioning "past", else 0.2, for every constraint
            return [SimpleNamespace(p_pass=np.asarray([[0.9 if "past" in r else 0.2] * len(cs) for r in rs],
                                                      np.float32))
                    for rs, cs in zip(responses, constraints)]

    cs = parse_constraints([{"type": "no_commas"}, {"type": "tense", "tense": "past"},
                            {"type": "must_include", "words": ["salt"], "verify": "both"}])
    v = ConstraintVerifier(judge=ScriptedJudge(), default="auto")
    (res,) = v.verify(["p"], [["salt in the past", "salt, now", "past without it"]], [cs])
    assert res.methods == ("program", "llm", "both")
    assert calls == [[[cs[1].text, cs[2].text]]]  # only LLM-verified constraints reach the judge, in one call
    np.testing.assert_array_equal(res.passes, [[True, True, True], [False, False, False], [True, True, False]])
    np.testing.assert_array_equal(res.violate, [False, True, True])
    # a prompt without constraints: nobody violates, the judge is not called
    calls.clear()
    (empty,) = v.verify(["p"], [["a", "b"]], [()])
    assert calls == [] and not empty.violate.any()


def test_verifier_without_a_judge_refuses_llm_constraints():
    cs = parse_constraints([{"type": "fuzzy", "text": "Keep a hopeful tone."}])
    with pytest.raises(ValueError, match="no judge"):
        ConstraintVerifier(judge=None).verify(["p"], [["a"]], [cs])
    assert isinstance(cs[0], Constraint) and not cs[0].programmatic


def test_an_ifeval_file_loads_as_training_records(tmp_path):
    """Official IFEval lines load as they are: id from key, one constraint per instruction, null kwargs dropped;
    bad lines are named."""
    from rubric_jax.data import DataError

    f = tmp_path / "ifeval.jsonl"
    f.write_text('{"key": 7, "prompt": "Write a poem.", "instruction_id_list": ["punctuation:no_comma", '
                 '"length_constraints:number_words"], "kwargs": [{}, {"num_words": 50, "relation": "less than", '
                 '"keyword": null}]}\n')
    (rec,) = load_jsonl(str(f))
    assert rec.id == "7" and [c["type"] for c in rec.constraints] == ["punctuation:no_comma",
                                                                       "length_constraints:number_words"]
    cs = parse_constraints(rec.constraints, where=rec.id)
    assert check_program(cs[1], "short one") and not check_program(cs[0], "a, b")
    f.write_text('{"key": 1, "prompt": "x", "instruction_id_list": ["punctuation:no_comma"], "kwargs": []}\n')
    with pytest.raises(DataError, match="ifeval.jsonl:1: \"kwargs\" must be a list of 1 objects"):
        load_jsonl(str(f))
