"""RARE's rubric writer: prompt, validation, the retry loop (scripted backend), the remote backend against
our own serving app, and the embedded SmolLM2 as a schema-constrained local writer (slow: 3 seeds in CI, 20 in the
heavy tier)."""

import json
import os
import time

import numpy as np
import pytest

from rubric_jax.rare.writer import (CUT_MARK, DIRECTION_TEXT, LocalWriter, RemoteWriter, ReplacementError,
                                    WriteRequest, WriterConfig, build_messages, cut_response, direction_instruction,
                                    answer_shapes, replacement_grammar, replacement_schema, validate_replacements,
                                    write)
from rubric_jax.rubrics.types import Criterion, Rubric

XLA_OPTIMIZED = True  # the real SmolLM2 writes criteria in it (conftest._xla_optimisation)

QUERY = ("Write a short story (about 120 words) about a lighthouse keeper who finds a message in a bottle. "
         "Keep it hopeful and end with the keeper making a decision.")

RUBRIC = Rubric("lighthouse_story", (
    Criterion("keeper_protagonist", "Keeper as protagonist", "Is a lighthouse keeper the main character of the story?",
              ("The main character is not a lighthouse keeper.", "A lighthouse keeper is the main character."),
              max_points=2, scoring="binary"),
    Criterion("bottle_message", "Message in a bottle",
              "Does the keeper find a message in a bottle, and does it matter to the plot?",
              ("No message in a bottle is found.", "A message is found but plays no part.",
               "The found message drives the story."), max_points=2),
    Criterion("hopeful_tone", "Hopeful tone", "Is the overall tone of the story hopeful?",
              ("The tone is bleak or cynical.", "The tone is mixed.", "The tone is mostly hopeful.",
               "The tone is clearly and consistently hopeful."), max_points=3),
    Criterion("final_decision", "Ending decision", "Does the story end with the keeper making a clear decision?",
              ("The story ends with no decision.", "The story ends with a clear decision by the keeper."),
              max_points=1),
    Criterion("length_limit", "Length", "Is the story close to 120 words long?",
              ("Far from 120 words (under 60 or over 240).", "Somewhat off (60-90 or 160-240 words).",
               "Close to 120 words (90-160)."), max_points=2),
    Criterion("vivid_setting", "Vivid setting",
              "Does the story make the lighthouse and the sea vivid through concrete sensory detail?",
              ("No sensory detail of the setting.", "Generic setting detail.", "Some concrete sensory detail.",
               "Rich, specific sensory detail throughout."), max_points=3),
))

RESPONSES = (
    "Every night Elias climbed the ninety steps of the Harrow Point light. One grey morning he found a green bottle "
    "wedged in the rocks. Inside, a child's note: 'Is anyone out there?' Elias smiled for the first time in months. "
    "He had thought the world had forgotten the lighthouse. He wrote back, sealed the bottle and threw it into the "
    "tide, and decided he would stay another winter, keeping the light burning for whoever might be sailing home.",
    "The keeper, Mara, was tired of the wind. A bottle rolled onto the beach with a letter from a sailor who had "
    "been saved by her light years ago. 'Thank you,' it said. Mara read it three times. The lamp, the salt, the "
    "endless stairs suddenly felt worth it. She decided to stop writing her resignation letter. The sea was "
    "calm that evening and the beam swept the water like a promise.",
    "Old Tom kept the light. He found a bottle. The message said: help is coming. Tom was happy. He looked at the "
    "sea. The sea was blue and big and the waves were big too. Tom thought about his life and the light and the "
    "bottle and the message and the sea. In the end Tom decided to paint the lighthouse red so ships would see it "
    "better, and he felt hopeful about the future and the ships and everything.",
    "Nadia had kept the lighthouse alone for eleven years when the bottle came. The note inside was a map drawn by "
    "someone on the island across the strait, with a single word: 'Visit.' She laughed at the storm clouds, "
    "packed bread and a lantern, and chose, at last, to row across at dawn. Behind her the light kept turning, "
    "patient and bright.",
)

# Every response has full marks on the first two criteria (the saturated ones).
SCORES = np.array([[2, 2, 3, 1, 2, 2], [2, 2, 3, 1, 2, 3], [2, 2, 2, 1, 1, 0], [2, 2, 3, 1, 2, 2]])
ELIGIBLE = ("keeper_protagonist", "bottle_message")


def make_request(direction="negative", count=2, eligible=ELIGIBLE, responses=RESPONSES, scores=SCORES):
    return WriteRequest(query=QUERY, rubric=RUBRIC, eligible=eligible, count=count, direction=direction,
                        responses=responses, scores=scores, valid=np.ones_like(scores, bool))


def update(cid="keeper_protagonist", polarity="negative", check=None, levels=None, **extra):
    m = RUBRIC[cid].max_points
    u = {"id": cid, "polarity": polarity, "diagnosis": f"some stories over-explain ({cid})",
         "name": f"No over-explaining ({cid})",
         "check": check or f"Does the story avoid spelling out feelings the events already show? ({cid})",
         "levels": levels if levels is not None else [f"score {k}: feelings stated outright {m - k} times"
                                                      for k in range(m + 1)]}
    return u | extra


def good_answer(p0="negative", p1="negative"):
    return json.dumps({"updates": [update("keeper_protagonist", p0, check="Does the story avoid filler repetition?"),
                                   update("bottle_message", p1, check="Are the sentences varied in length?")]})


# ---- validation ---------------------------------------------------------------------------------------------------

def test_accepts_a_good_answer_and_the_result_builds_a_rubric():
    req = make_request()
    out = validate_replacements(good_answer(), req)
    assert sorted(out) == sorted(ELIGIBLE)
    c = out["keeper_protagonist"]
    # a binary criterion's replacement is a full-levels criterion with the same id and max
    assert (c.id, c.max_points, c.scoring, c.polarity, len(c.levels)) == ("keeper_protagonist", 2, "levels",
                                                                         "negative", 3)
    new = RUBRIC.replace_criteria(out)
    assert new.ids == RUBRIC.ids and new.max_points == RUBRIC.max_points and new.version == RUBRIC.version + 1
    assert new["bottle_message"].check == "Are the sentences varied in length?"
    # a parsed object is accepted as well as its text; a lone ```json fence is tolerated
    assert validate_replacements(json.loads(good_answer()), req) == out
    assert validate_replacements("```json\n" + good_answer() + "\n```", req) == out


def _reject(answer, req=None):
    with pytest.raises(ReplacementError) as e:
        validate_replacements(answer if isinstance(answer, str) else json.dumps(answer), req or make_request())
    return str(e.value)


@pytest.mark.parametrize("answer, expected", [
    ('{"updates": [', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"criteria": []}', 'no "updates" list'),
    ({"updates": [update()]}, "exactly 2 update(s), got 1"),
    ({"updates": [update(), update("bottle_message"), update("bottle_message")]}, "exactly 2 update(s), got 3"),
    ({"updates": [update("hopeful_tone"), update("bottle_message")]},
     "updates[0].id: 'hopeful_tone' is a retained criterion"),
    ({"updates": [update(id="keeper"), update("bottle_message")]}, "updates[0].id: 'keeper' is not a criterion"),
    ({"updates": [update(), update(check="Something else entirely?")]},
     "updates[1].id: 'keeper_protagonist' is already replaced by updates[0]"),
    ({"updates": [update(max_points=3), update("bottle_message")]}, "updates[0].max_points: must stay 2"),
    ({"updates": [update(levels=["a", "b"]), update("bottle_message")]},
     "updates[0].levels: must list exactly 3 descriptions, one per score 0..2"),
    ({"updates": [update(), update("bottle_message", levels=["a b c", " ", "c d e"])]},
     "updates[1].levels[1]: the description of score 1 must be a non-empty string"),
    ({"updates": [update(name=""), update("bottle_message")]}, "updates[0].name: must be a non-empty string"),
    ({"updates": [{k: v for k, v in update().items() if k != "check"}, update("bottle_message")]},
     'updates[0]: missing field "check"'),
    ({"updates": [update(diagnosis="<the observed difference, short>"), update("bottle_message")]},
     "updates[0].diagnosis: '<the observed difference, short>' is the template's placeholder"),
    ({"updates": [update(polarity="positive"), update("bottle_message")]},
     "updates[0].polarity: 'positive' is not allowed; the negative direction requires 'negative'"),
    ({"updates": [update(check="Is the overall tone of the story HOPEFUL"), update("bottle_message")]},
     "updates[0].check: duplicates the check of the retained criterion 'hopeful_tone'"),
    ({"updates": [update(check="Is the prose tight?"), update("bottle_message", check="is the  prose, tight")]},
     "updates[1].check: duplicates the check of updates[0]"),
    ({"updates": [update(check="Is a lighthouse keeper the main character of the story"),
                  update("bottle_message")]},
     "updates[0].check: restates the criterion it replaces ('keeper_protagonist')"),
    ({"updates": [update(levels=["Told outright here.", "told -- OUTRIGHT here", "Shown, never told."]),
                  update("bottle_message")]},
     "updates[0].levels[1]: repeats levels[0]; each score needs its own description"),
    ({"updates": [update(check="Is it tidy enough overall?", levels=["Is it tidy enough overall", "b c d", "c d e"]),
                  update("bottle_message")]},
     "updates[0].levels[0]: repeats the criterion's name or check"),
    ({"updates": [update(), update("bottle_message", levels=["none of it", "Diagnosis", "all of it"])]},
     "updates[1].levels[1]: 'Diagnosis' is a key of the answer format"),
    # what a small writer produces when it has nothing to say
    ({"updates": [update(check="Is it tidy?"), update("bottle_message")]},
     "updates[0].check: 'Is it tidy?' is too short: the check needs at least 4 words"),
    ({"updates": [update(levels=["score 0 here", "100%", "score 2 here"]), update("bottle_message")]},
     "updates[0].levels[1]: '100%' is too short: the description of score 1 needs at least 3 words"),
    ({"updates": [update(name="Does the story show its feelings", check="Does the story show its feelings?"),
                  update("bottle_message")]},
     "updates[0].check: repeats the criterion's name"),
    ({"updates": [update(levels=["The neon<the observed gap>", "b c d", "c d e"]), update("bottle_message")]},
     "contains angle brackets, which mark the template's placeholders"),
    ({"updates": [update(name="The observed difference between responses, short"), update("bottle_message")]},
     "updates[0].name: 'The observed difference between responses, short' copies the template's placeholder"),
    ({"updates": [update(levels=["What earns 0 here", "b c d", "c d e"]), update("bottle_message")]},
     "copies the template's placeholder ('what earns')"),
])
def test_rejects_each_malformed_kind_with_a_precise_message(answer, expected):
    assert expected in _reject(answer)


def test_polarity_rules_per_direction():
    neg, pos = good_answer("negative", "negative"), good_answer("positive", "positive")
    assert "the positive direction requires 'positive'" in _reject(neg, make_request("positive"))
    validate_replacements(pos, make_request("positive"))
    mixed = make_request("mixed")
    for one_sided in (neg, pos):
        assert "the mixed direction with 2 updates needs both polarities" in _reject(one_sided, mixed)
    validate_replacements(good_answer("positive", "negative"), mixed)
    # mixed with a single update: either polarity on its own is fine
    single = make_request("mixed", count=1)
    for p in ("positive", "negative"):
        validate_replacements({"updates": [update("bottle_message", p)]}, single)


def test_request_checks_its_own_shape():
    with pytest.raises(ValueError, match="count"):
        make_request(count=3)
    with pytest.raises(ValueError, match="direction"):
        make_request(direction="sideways")
    with pytest.raises(ValueError, match="eligible"):
        make_request(eligible=("nope",), count=1)
    with pytest.raises(ValueError, match="shape"):
        make_request(scores=SCORES[:, :5])


# ---- prompt -------------------------------------------------------------------------------------------------------

def test_prompt_contains_query_saturated_ids_responses_scores_and_direction():
    req = make_request("negative")
    msgs = build_messages(req, WriterConfig())
    assert [m["role"] for m in msgs] == ["system", "user"]
    text = msgs[1]["content"]
    assert QUERY in text
    sat = text.split("## Saturated criteria")[1].split("##")[0]
    assert "`keeper_protagonist`" in sat and "`bottle_message`" in sat and "hopeful_tone" not in sat
    retained = text.split("## Retained criteria")[1].split("##")[0]
    assert all(c.check in retained for c in req.retained) and "keeper_protagonist" not in retained
    for r in RESPONSES:
        assert r in text
    assert "Scores: keeper_protagonist=2/2, bottle_message=2/2, hopeful_tone=2/3, final_decision=1/1, " \
           "length_limit=1/2, vivid_setting=0/3" in text
    assert "scored 0 or 2 only" in text  # the binary criterion's scale is shown as such
    assert DIRECTION_TEXT["negative"] in text
    assert '"updates"' in text and '"levels"' in text and "Write exactly 2 update(s)" in text
    for d in ("positive", "mixed"):
        other = build_messages(make_request(d), WriterConfig())[1]["content"]
        assert direction_instruction(d, 2) in other and DIRECTION_TEXT["negative"] not in other
    assert "at least one positive and at least one negative" in direction_instruction("mixed", 2)
    assert "at least one positive" not in direction_instruction("mixed", 1)


def test_invalid_scores_show_as_na():
    valid = np.ones_like(SCORES, bool)
    valid[1, 4] = False
    req = WriteRequest(QUERY, RUBRIC, ELIGIBLE, 2, "negative", RESPONSES, SCORES, valid)
    assert "length_limit=n/a" in build_messages(req)[1]["content"]


def test_long_response_is_cut_to_the_budget():
    from rubric_jax import load_tokenizer

    qwen_tokenizer = load_tokenizer("qwen3")
    long = " ".join(f"word{k}" for k in range(2000))
    cfg = WriterConfig(max_response_tokens=50)
    req = make_request(responses=(long, "A short reply.") + RESPONSES[2:])
    text = build_messages(req, cfg, qwen_tokenizer)[1]["content"]
    shown = text.split("### Response 1")[1].split("<<<\n")[1].split("\n>>>")[0]
    assert shown.endswith(CUT_MARK)
    body = shown[: -len(CUT_MARK)].strip()
    assert long.startswith(body) and len(qwen_tokenizer.encode(body)) <= 50 and len(body) > 50
    assert "<<<\nA short reply.\n>>>" in text  # a short one is whole
    # without a tokenizer: ~4 characters a token
    cut, was_cut = cut_response(long, 50)
    assert was_cut and cut == long[:200].rstrip() + " " + CUT_MARK
    assert cut_response("short", 50) == ("short", False)


# ---- schema -------------------------------------------------------------------------------------------------------

def test_schema_fixes_ids_polarities_and_level_counts():
    import jsonschema

    good = json.loads(good_answer())
    neg = replacement_schema(make_request("negative"))
    jsonschema.validate(good, neg)
    for bad in (json.loads(good_answer("positive", "negative")),  # wrong polarity
                {"updates": [update(), update()]},  # repeated id
                {"updates": [update(), update("bottle_message", levels=["a", "b"])]},  # too few levels
                {"updates": [update(name=" padded"), update("bottle_message")]},  # blank first character
                {"updates": [update(check="x" * 301), update("bottle_message")]}):  # over maxLength
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, neg)
    mixed = replacement_schema(make_request("mixed"))
    jsonschema.validate(json.loads(good_answer("positive", "negative")), mixed)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(good, mixed)  # both negative


# ---- the local writer's grammar (llguidance, no model) -------------------------------------------------------------

@pytest.fixture(scope="module")
def llg():
    from rubric_jax import load_tokenizer
    from rubric_jax.rare.constrained import llg_tokenizer

    tok = load_tokenizer("qwen3")
    return tok, llg_tokenizer(tok, tok.vocab_size)


def grammar_accepts(llg, grammar, answer) -> bool:
    from rubric_jax.rare.constrained import new_matcher

    tok, llt = llg
    text = answer if isinstance(answer, str) else json.dumps(answer, separators=(",", ":"), ensure_ascii=False)
    m = new_matcher(llt, grammar)
    return m.consume_tokens(tok.encode(text)) and m.is_accepting()


def test_grammar_has_the_schemas_shape(llg):
    req = make_request("negative")
    g = replacement_grammar(req)
    assert grammar_accepts(llg, g, json.loads(good_answer()))
    for bad in (json.loads(good_answer("positive", "negative")),  # polarity not allowed
                {"updates": [update(), update(check="Another check?")]},  # repeated id
                {"updates": [update("bottle_message"), update()]},  # ids out of rubric order
                {"updates": [update()]},  # too few updates
                {"updates": [update(), update("bottle_message", levels=["a", "b"])]},  # too few levels
                {"updates": [update(name=" padded"), update("bottle_message")]},  # blank first character
                {"updates": [update(name="<short title>"), update("bottle_message")]},  # the placeholder
                {"updates": [update(check="x" * 301), update("bottle_message")]}):  # over max_check_chars
        assert not grammar_accepts(llg, g, bad), bad
    assert not grammar_accepts(llg, g, good_answer())  # indented JSON: the grammar is compact
    mixed = replacement_grammar(make_request("mixed"))
    assert grammar_accepts(llg, mixed, json.loads(good_answer("positive", "negative")))
    assert not grammar_accepts(llg, mixed, json.loads(good_answer("negative", "negative")))


def test_many_alternatives_fall_back_to_looser_shapes(llg):
    import jsonschema

    req = make_request("mixed", count=2, eligible=ELIGIBLE + ("vivid_setting",))
    answer = {"updates": [update("vivid_setting", "positive", check="Are the images fresh?"),
                          update("bottle_message", "negative", check="Is the message's wording believable?")]}
    one_sided = {"updates": [update("keeper_protagonist", "negative", check="Is the prose tight?"),
                             update("bottle_message", "negative", check="Is the ending earned?")]}
    tight = WriterConfig()  # 3 id pairs x 2 polarity patterns: fixed tuples, ids in `eligible` order
    assert len(answer_shapes(req, tight)) == 6
    loose = WriterConfig(max_schema_alternatives=2)  # per position: any eligible id, either polarity
    assert answer_shapes(req, loose) == [[(req.eligible, ("negative", "positive"))] * 2]
    validate_replacements(answer, req)
    assert "needs both polarities" in _reject(one_sided, req)
    for cfg, expect_answer, expect_one_sided in ((tight, False, False), (loose, True, True)):
        assert grammar_accepts(llg, replacement_grammar(req, cfg), answer) == expect_answer  # ids out of order
        assert grammar_accepts(llg, replacement_grammar(req, cfg), one_sided) == expect_one_sided
        schema = replacement_schema(req, cfg)
        assert jsonschema.Draft202012Validator(schema).is_valid(answer) == expect_answer
    ordered = {"updates": answer["updates"][::-1]}
    assert grammar_accepts(llg, replacement_grammar(req, tight), ordered)


@pytest.mark.parametrize("check", [
    "Is the overall tone of the story hopeful?", "IS THE OVERALL TONE OF THE STORY HOPEFUL",
    "Is the overall tone of the story -- hopeful !!", "Is the \u201coverall\u201d tone of the story hopeful\u2026",
    "Is the overall tone of the story hopeful\n", "Is the overall-tone of the story hopeful",
    "Is the overall tone of the story hopefully?", "Is the overall tone of the story hopeful? Yes.",
    "Is the overall tone of the story hopeful \U0001f642", "Is the overalltone of the story hopeful",
    "Is a lighthouse keeper the main character of the story", "Is a lighthouse keeper the main character?!",
])
def test_grammar_refuses_exactly_the_checks_validation_calls_duplicates(llg, check):
    """The negated terminal and `normalise_text` agree: the grammar refuses a check iff validation would
    reject it as a restatement of a retained criterion or of the replaced one."""
    req = make_request("negative")
    answer = {"updates": [update(check=check), update("bottle_message", check="Are the sentences varied?")]}
    try:
        validate_replacements(answer, req)
        valid = True
    except ReplacementError as e:
        assert "duplicates the check" in str(e) or "restates the criterion" in str(e)
        valid = False
    assert grammar_accepts(llg, replacement_grammar(req), answer) == valid


def test_grammar_forbids_a_later_check_restating_an_earlier_one(llg):
    req = make_request("negative")
    same = {"updates": [update(check="Is the prose tight?"), update("bottle_message", check="is the prose -- TIGHT")]}
    assert grammar_accepts(llg, replacement_grammar(req), same)  # nothing written yet: the static grammar allows it
    assert not grammar_accepts(llg, replacement_grammar(req, written=["is the prose tight"]), same)
    other = {"updates": [update(check="Is the prose tight?"), update("bottle_message", check="Is the prose lush?")]}
    assert grammar_accepts(llg, replacement_grammar(req, written=["is the prose tight"]), other)


def test_grammar_keeps_levels_distinct_from_each_other_the_name_check_and_format_keys(llg):
    """What validation rejects in levels, the grammar refuses: a level repeating an earlier level of its
    update, the update's name or check (`taken`, as the local writer passes it once they are written), or a
    bare format key."""
    from rubric_jax.rare.writer import finished_texts

    req = make_request("negative")

    def answer(levels):
        return {"updates": [update(check="Is the prose tight throughout?", levels=levels), update("bottle_message")]}

    fine = answer(["Padded all the way.", "Padded in places.", "Tight from start to end."])
    text = json.dumps(fine, separators=(",", ":"), ensure_ascii=False)
    checks, taken = finished_texts(text)
    assert checks[0] == "is the prose tight throughout"
    assert taken[0][2:] == ("padded all the way", "padded in places", "tight from start to end")
    assert grammar_accepts(llg, replacement_grammar(req, written=checks, taken=taken), fine)
    assert not grammar_accepts(llg, replacement_grammar(req), answer(["Padded all the way.", "check",
                                                                      "Tight from start to end."]))
    for levels in (["Padded in places.", "PADDED, in places", "Tight from start to end."],
                   ["Is the prose tight throughout", "Padded in places.", "Tight from start to end."]):
        bad = answer(levels)
        _, taken_bad = finished_texts(json.dumps(bad, separators=(",", ":"), ensure_ascii=False))
        with pytest.raises(ReplacementError):
            validate_replacements(bad, req)
        assert not grammar_accepts(llg, replacement_grammar(req, written=checks, taken=taken_bad), bad)


def test_grammar_refuses_what_a_small_writer_writes_when_it_has_nothing_to_say(llg):
    """Validation and grammar agree on the rules against empty criteria: angle brackets anywhere, a string
    opening with the template's placeholder, a check under four words or equal to the name, a level under
    three words."""
    from rubric_jax.rare.writer import finished_texts

    req = make_request("negative")
    good = json.loads(good_answer())
    assert grammar_accepts(llg, replacement_grammar(req), good)
    bads = [{"updates": [update(**kw), update("bottle_message", check="Are the sentences varied in length?")]}
            for kw in (dict(levels=["The neon<the gap> here", "b c d", "c d e"]),
                       dict(name="The observed difference between responses, short"),
                       dict(check="Is it tidy?"),
                       dict(levels=["score 0 here", "100%", "score 2 here"]),
                       dict(name="Does the story show its feelings", check="Does the story show its feelings?"),
                       dict(levels=["what earns 0 here", "b c d", "c d e"]))]
    for bad in bads:
        with pytest.raises(ReplacementError):
            validate_replacements(bad, req)
        text = json.dumps(bad, separators=(",", ":"), ensure_ascii=False)
        # the grammar as the local writer rebuilds it once the strings before the offending one are written
        checks, taken = finished_texts(text)
        assert not grammar_accepts(llg, replacement_grammar(req, written=checks, taken=taken), bad), bad


# ---- retry loop with a scripted backend ----------------------------------------------------------------------------

class Scripted:
    """Returns canned answers in order, one per conversation; records what it was sent."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def complete(self, conversations, seeds, json_schemas=None, requests=None):
        self.calls.append((conversations, list(seeds), json_schemas))
        return [self.answers.pop(0) for _ in conversations]


def test_bad_answer_is_retried_with_its_error_and_accepted_on_attempt_two():
    bad = json.dumps({"updates": [update()]})  # one update instead of two
    backend = Scripted([bad, good_answer()])
    [out] = write(backend, [make_request()], WriterConfig(max_attempts=3))
    assert out.replacements is not None and sorted(out.replacements) == sorted(ELIGIBLE)
    assert out.attempts == 2 and len(out.errors) == 1 and "exactly 2 update(s), got 1" in out.errors[0]
    assert out.raw == [bad, good_answer()]
    (first, seeds1, schemas1), (second, seeds2, _) = backend.calls
    assert len(first[0]) == 2 and schemas1[0] == replacement_schema(make_request())
    convo = second[0]
    assert convo[:2] == first[0]
    assert convo[2] == {"role": "assistant", "content": bad}
    assert convo[3]["role"] == "user" and out.errors[0] in convo[3]["content"]
    assert seeds1 != seeds2  # a fresh seed per attempt


def test_always_bad_gives_up_after_max_attempts(caplog):
    backend = Scripted(["not json"] * 2 + [good_answer()] + ["{}"] * 2)
    reqs = [make_request(), make_request("positive")]
    with caplog.at_level("WARNING"):
        outs = write(backend, reqs, WriterConfig(max_attempts=3))
    # attempt 1: both bad; attempt 2: the first request passes (negative answer), the second
    # (positive) stays bad; attempt 3: only the second is sent
    assert [len(c[0]) for c in backend.calls] == [2, 2, 1]
    assert outs[0].replacements is not None and outs[0].attempts == 2
    gave_up = outs[1]
    assert gave_up.replacements is None and gave_up.attempts == 3 and len(gave_up.errors) == 3
    assert gave_up.raw == ["not json", "{}", "{}"]
    assert "not valid JSON" in gave_up.errors[0] and 'no "updates" list' in gave_up.errors[2]
    assert any("gave up" in r.message and 'no "updates" list' in r.message for r in caplog.records)


def test_a_backend_failure_counts_as_an_attempt_and_does_not_raise():
    from rubric_jax.openai_client import ChatError

    class Failing:
        def complete(self, conversations, seeds, json_schemas=None, requests=None):
            raise ChatError("server gave up")

    [out] = write(Failing(), [make_request()], WriterConfig(max_attempts=2))
    assert out.replacements is None and out.attempts == 2 and out.raw == []
    assert all("server gave up" in e for e in out.errors)


# ---- real backends (slow) -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def long_context_server(tiny_qwen3, tmp_path_factory):
    """rubric_jax.serve's app (its Engine and create_app, run by uvicorn in a thread of this process; the
    `python -m rubric_jax.serve` subprocess is test_serve.py's and test_openai_client.py's) on the session's tiny
    random Qwen3 with a 2048-token context: the writer's prompt (~700 tokens at the least) does not fit its 512."""
    from serve_fixture import thread_server

    from rubric_jax.serve import Engine, create_app, load_for_serving

    src, d = tiny_qwen3[0], str(tmp_path_factory.mktemp("serve_rare") / "tiny_qwen3")
    os.makedirs(d)
    for f in os.listdir(src):  # the same weights and tokenizer, only the context changed
        if f != "config.json":
            os.symlink(os.path.join(src, f), os.path.join(d, f))
    config = json.load(open(os.path.join(src, "config.json")))
    json.dump(config | {"max_position_embeddings": 2048}, open(os.path.join(d, "config.json"), "w"))
    model, tokenizer = load_for_serving(d)
    app = create_app(Engine(model, tokenizer, max_batch=8), "tiny_qwen3", max_batch=8, batch_wait_ms=300)
    with thread_server(app, what="serve app") as port:
        yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.slow
def test_remote_writer_against_the_live_server_retries_then_gives_up(long_context_server):
    import httpx

    from rubric_jax.openai_client import ChatClient

    base = long_context_server
    stats = lambda: httpx.get(f"{base}/stats", timeout=10).json()["requests"]  # noqa: E731
    rub = Rubric("rain", (Criterion("tone", "Tone", "Is the line hopeful?"),
                          Criterion("length", "Length", "Is it one line?")))
    # a query long enough that all three prompts (~780, 870 and 970 tokens) fall in one of the server's prompt
    # buckets (1024): one compiled program, not two
    query = ("Write one line about rain: the slow, grey rain of a late autumn afternoon in a small harbour town, heard "
             "from a kitchen table where someone waits for a letter that may never come. Keep it under twenty words, "
             "plain and concrete, in the present tense, without rhyme, without naming any feeling outright, and end "
             "on a sound rather than an image: the gutter, the kettle, a door.")
    req = WriteRequest(query, rub, ("tone",), 1, "negative", ("Rain taps.", "Rain falls."),
                       np.ones((2, 2), int), np.ones((2, 2), bool))
    cfg = WriterConfig(max_attempts=3, max_new_tokens=24)
    writer = RemoteWriter(ChatClient(base, "tiny_qwen3", max_retries=0), cfg)
    sent = []
    complete = writer.complete

    def spy(conversations, seeds, **kw):
        sent.append(conversations)
        return complete(conversations, seeds, **kw)

    writer.complete = spy
    before = stats()
    [out] = write(writer, [req], cfg)  # the tiny random model writes garbage
    assert stats() - before == 3  # one request per attempt reached the server
    assert out.replacements is None and out.attempts == 3 and len(out.errors) == 3 and len(out.raw) == 3
    # the third request carries both rejected answers, each followed by its error
    last = sent[2][0]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last[2]["content"] == out.raw[0] and out.errors[0] in last[3]["content"]
    assert last[4]["content"] == out.raw[1] and out.errors[1] in last[5]["content"]


def smollm2_writer_errors(model, tokenizer, cfg: WriterConfig, seeds) -> list[str]:
    """The embedded SmolLM2 as a constrained local writer, one batched call of the negative request with these
    seeds: the validation error of each first answer that fails the full validator (none expected)."""
    req = make_request("negative")
    writer = LocalWriter(model, tokenizer, cfg)
    convo = build_messages(req, cfg, tokenizer)
    t0 = time.perf_counter()
    texts = writer.complete([convo] * len(seeds), list(seeds), requests=[req] * len(seeds))
    wall = time.perf_counter() - t0
    errors = []
    for t in texts:
        try:
            validate_replacements(t, req)
        except ReplacementError as e:
            errors.append(f"{e}: {t[:300]}")
    print(f"\nSmolLM2 constrained writer: {len(seeds) - len(errors)}/{len(seeds)} valid, {wall:.1f} s for "
          f"{len(seeds)} seeded tries (answers {[len(tokenizer.encode(t)) for t in texts]} tokens)")
    return errors


@pytest.mark.slow
@pytest.mark.smollm2
def test_smollm2_local_writer_passes_full_validation(smollm2, smollm2_tokenizer):
    """CI's version of the 20-of-20 check below (heavy tier): the embedded SmolLM2's first answers pass every
    check, 3 of its 20 seeds in one batched call, with tighter string limits (answers of ~170-250 tokens
    instead of up to ~860: decoding time is one step per token of the longest answer). The grammar itself
    has fast tests above (no model) and in test_constrained.py (tiny random model). Over 30 s on 2 loaded
    cores: ~250 decode steps of the 135M model plus its prefill of the ~1600-token prompt."""
    cfg = WriterConfig(max_new_tokens=1536, max_name_chars=24, max_check_chars=64, max_level_chars=32,
                       max_diagnosis_chars=32)
    errors = smollm2_writer_errors(smollm2, smollm2_tokenizer, cfg, (3, 4, 5))
    assert not errors, errors


@pytest.mark.slow
@pytest.mark.smollm2
@pytest.mark.heavy
def test_smollm2_local_writer_passes_full_validation_20_of_20(smollm2, smollm2_tokenizer):
    """The embedded SmolLM2 as a constrained local writer: its first answer passes every check, 20 seeds in
    one batched call. Heavy: ~860 decode steps of a 24-row batch (~4 minutes on 2 cores); CI runs the
    3-seed version above."""
    # shorter string limits than the defaults: a 135M model often repeats itself up to the limit
    cfg = WriterConfig(max_new_tokens=1536, max_check_chars=200, max_level_chars=120, max_diagnosis_chars=160)
    errors = smollm2_writer_errors(smollm2, smollm2_tokenizer, cfg, range(20))
    assert not errors, errors
