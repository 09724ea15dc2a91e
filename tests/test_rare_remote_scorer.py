"""rubric_jax.rare.scoring.RemoteScorer (a RubricScorer over rubric_jax.judge.remote.RemoteJudge) against real HTTP servers: a scripted FastAPI judge (its answer
chosen by the response and criteria it is shown) and, slow, our own server (rubric_jax.serve)."""

import logging
import re

import numpy as np
import pytest

from rubric_jax.openai_client import ChatClient
from rubric_jax.judge.readout import read_scores_text as parse_scores
from rubric_jax.judge.remote import RemoteJudgeUnavailable, request_seed
from rubric_jax.rare.scoring import RemoteScorer
from rubric_jax.rubrics import Criterion, Rubric
from serve_fixture import free_port, thread_server

SECRET = "sk-test-REMOTE-JUDGE-9876543210"

FACTS = Criterion("facts", "Facts", "Are the stated facts correct?", max_points=3, scoring="binary",
                  levels=["Some fact is wrong.", "Every fact is right."])
STYLE = Criterion("style", "Style", "Is it well written?", max_points=4,
                  levels=["unreadable", "poor", "plain", "good", "excellent"])
SAFETY = Criterion("safety_note", "Safety", "Does it warn about the risk?", max_points=3, scoring="binary",
                   levels=["No warning.", "A clear warning."])
DEPTH = Criterion("depth", "Depth", "Does it explain why?", max_points=4,
                  levels=["no reason", "a hint", "one reason", "reasons", "a full account"])
RUBRICS = [Rubric("r0", (FACTS, STYLE)), Rubric("r1", (DEPTH, SAFETY))]  # the levels criterion first in group 1
PROMPTS = ["Explain tides.", "How do I clean a chimney?"]
RESPONSES = [[f"answer g0r{a}" for a in range(3)], [f"answer g1r{a}" for a in range(3)]]
# the scores the scripted judge gives, per response and criterion id
TRUTH = {"answer g0r0": {"facts": 3, "style": 4}, "answer g0r1": {"facts": 0, "style": 2},
         "answer g0r2": {"facts": 3, "style": 0}, "answer g1r0": {"depth": 1, "safety_note": 3},
         "answer g1r1": {"depth": 4, "safety_note": 0}, "answer g1r2": {"depth": 3, "safety_note": 3}}
EXPECTED = [np.array([[3, 4], [0, 2], [3, 0]]), np.array([[1, 3], [4, 0], [3, 3]])]


def good_answer(response, ids):
    # decorated and in reverse order: cells are found by id, not by position
    return "\n".join(f"- **`{cid}`**: {TRUTH[response][cid]}" for cid in reversed(ids))


@pytest.fixture(scope="module")
def judge_server():
    """(base URL, state). state["script"](response, criterion ids, body, authorization) returns the answer
    text or an int HTTP status; state["seen"] lists what each request carried."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    state = {"script": lambda r, ids, body, auth: good_answer(r, ids), "seen": []}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        user = body["messages"][-1]["content"]
        response = re.search(r"### Response\n(.*?)\n\n### Criteria", user, re.S).group(1)
        ids = re.findall(r"^Criterion id: (\S+)$", user, re.M)
        auth = request.headers.get("authorization")
        state["seen"].append({"response": response, "ids": ids, "body": body, "auth": auth})
        out = state["script"](response, ids, body, auth)
        if isinstance(out, int):
            return JSONResponse({"error": {"message": f"judge overloaded (you sent {auth})"}}, out)
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": out}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    with thread_server(app, what="scripted judge") as port:
        yield f"http://127.0.0.1:{port}/v1", state


@pytest.fixture
def server(judge_server):
    base, state = judge_server
    state["seen"].clear()
    state["script"] = lambda r, ids, body, auth: good_answer(r, ids)
    return base, state


def scorer_for(base, **kw):
    return RemoteScorer(ChatClient(base, "judge-model", max_retries=0, backoff_s=0.01, concurrency=4), **kw)


def cells(groups):
    return [(g.scores.tolist(), g.valid.tolist()) for g in groups]


# ---- parsing ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("facts: 3\nstyle: 2", [3, 2]),
    ("**Facts** : `0`\n1. `style` (Style) = 4/4", [0, 4]),  # markup, case, numbering, the name, "/ m"
    ("Here are my grades.\nstyle: the prose is clear\nstyle: 3\nfacts: Score: 3 (all correct)", [3, 3]),
    ("facts: 2\nstyle: 5", [None, None]),  # binary rejects in-between values; 5 is above the scale
    ("facts: 3\nfacts: 0\nstyle: 2\nstyle: 2", [None, 2]),  # two different scores; one score twice is fine
    ("style: 3.5\nfacts: 0-3", [None, None]),  # not one integer
    ("facts_extra: 3\nstyle: 1", [None, 1]),  # another id that starts with this one is not this one
    ("I cannot grade this.", [None, None]),
])
def test_parse_scores(text, expected):
    assert parse_scores(text, [FACTS, STYLE]) == expected


def test_request_seeds_are_reproducible_and_differ_per_attempt_and_cell():
    seeds = {(b, a, t): request_seed(7, b, a, t) for b in range(3) for a in range(4) for t in range(2)}
    assert len(set(seeds.values())) == len(seeds)
    assert all(0 <= s < 2 ** 31 for s in seeds.values())
    assert seeds == {(b, a, t): request_seed(7, b, a, t) for b in range(3) for a in range(4) for t in range(2)}
    assert request_seed(8, 0, 0, 0) != seeds[0, 0, 0]


# ---- the scripted judge ----------------------------------------------------------------------------------------

def test_scores_land_in_their_cells(server):
    base, state = server
    groups = scorer_for(base).score(PROMPTS, RESPONSES, RUBRICS, seed=11)
    assert len(groups) == 2
    for g, exp, rub in zip(groups, EXPECTED, RUBRICS):
        assert g.scores.dtype == np.int32 and g.scores.shape == (3, 2) and g.valid.dtype == bool
        np.testing.assert_array_equal(g.scores, exp)
        assert g.valid.all() and (g.retried, g.recovered) == (0, 0)
        np.testing.assert_array_equal(g.max_points, rub.max_points)
    seen = state["seen"]
    assert len(seen) == 6  # one request per response, every criterion of its rubric in it
    by_response = {s["response"]: s for s in seen}
    assert by_response["answer g1r0"]["ids"] == ["depth", "safety_note"]
    for s in seen:
        body = s["body"]
        assert body["temperature"] == 0.0 and body["max_tokens"] == 256 and body["model"] == "judge-model"
        assert isinstance(body["seed"], int)
        assert "independently" in body["messages"][0]["content"]
    assert len({s["body"]["seed"] for s in seen}) == 6
    user = by_response["answer g0r1"]["body"]["messages"][-1]["content"]
    assert "Explain tides." in user and "Allowed scores: 0 or 3 only" in user
    assert "Allowed scores: 0, 1, 2, 3 or 4" in user
    assert "- 3: Every fact is right." in user and "- 2: plain" in user and "facts: <score>" in user


def test_long_responses_are_cut_with_a_marker(server):
    base, state = server
    long = "answer g0r0" + "x" * 500 + "TAIL"
    state["script"] = lambda r, ids, body, auth: "facts: 3\nstyle: 1"
    g = scorer_for(base, max_response_chars=100).score(["p"], [[long]], [RUBRICS[0]], seed=0)[0]
    shown = state["seen"][0]["response"]
    assert shown.startswith(long[:100]) and "TAIL" not in shown and "response cut" in shown
    assert g.scores.tolist() == [[3, 1]]


@pytest.mark.parametrize("bad", [
    "style: 2",  # facts missing
    "facts: 2\nstyle: 2",  # in-between value for a binary criterion
    "facts: 0\nstyle: 2\nfacts: 3",  # two different scores
])
def test_an_unreadable_cell_is_retried_once_and_recovered(server, bad):
    base, state = server

    def script(r, ids, body, auth):
        if r == "answer g0r1" and body["temperature"] == 0.0:
            return bad
        return good_answer(r, ids)

    state["script"] = script
    groups = scorer_for(base).score(PROMPTS, RESPONSES, RUBRICS, seed=11)
    for g, exp in zip(groups, EXPECTED):
        np.testing.assert_array_equal(g.scores, exp)
        assert g.valid.all()
    assert (groups[0].retried, groups[0].recovered) == (1, 1) and (groups[1].retried, groups[1].recovered) == (0, 0)
    asks = [s for s in state["seen"] if s["response"] == "answer g0r1"]
    assert len(asks) == 2 and len(state["seen"]) == 7
    first, retry = asks[0]["body"], asks[1]["body"]
    assert asks[1]["ids"] == ["facts"]  # only the unreadable criterion is asked again
    assert retry["seed"] != first["seed"] and retry["temperature"] >= 0.7
    # the retry's seed is a function of the call's seed and the cell, not of chance
    again = scorer_for(base)
    state["seen"].clear()
    again.score(PROMPTS, RESPONSES, RUBRICS, seed=11)
    assert [s["body"]["seed"] for s in state["seen"] if s["response"] == "answer g0r1"] == \
        [first["seed"], retry["seed"]]


def test_still_unreadable_after_the_retry_is_invalid_and_zero(server):
    base, state = server

    def script(r, ids, body, auth):
        if r == "answer g1r1":  # depth readable, safety_note never
            return "depth: 4\nsafety_note: 1"
        return good_answer(r, ids)

    state["script"] = script
    groups = scorer_for(base, temperature=0.9).score(PROMPTS, RESPONSES, RUBRICS, seed=3)
    g = groups[1]
    assert g.valid.tolist() == [[True, True], [True, False], [True, True]]
    assert g.scores.tolist() == [[1, 3], [4, 0], [3, 3]]
    assert (g.retried, g.recovered) == (1, 0)
    retries = [s["body"] for s in state["seen"] if s["response"] == "answer g1r1"][1:]
    assert len(retries) == 1 and retries[0]["temperature"] == 0.9  # above 0.7 already: kept

    state["seen"].clear()
    g = scorer_for(base, retry=False).score(PROMPTS, RESPONSES, RUBRICS, seed=3)[1]
    assert len(state["seen"]) == 6 and (g.retried, g.recovered) == (0, 0) and not g.valid[1, 1]


def test_a_failing_request_leaves_only_its_cells_invalid(server):
    base, state = server
    state["script"] = lambda r, ids, body, auth: 500 if r == "answer g1r2" else good_answer(r, ids)
    groups = scorer_for(base).score(PROMPTS, RESPONSES, RUBRICS, seed=5)
    np.testing.assert_array_equal(groups[0].scores, EXPECTED[0])
    assert groups[0].valid.all()
    g = groups[1]
    assert g.valid.tolist() == [[True, True], [True, True], [False, False]]
    assert g.scores.tolist() == [[1, 3], [4, 0], [0, 0]]
    assert (g.retried, g.recovered) == (2, 0)

    # a failure that passes: the retry recovers both cells
    state["script"] = lambda r, ids, body, auth: (500 if r == "answer g1r2" and body["temperature"] == 0.0
                                                  else good_answer(r, ids))
    groups = scorer_for(base).score(PROMPTS, RESPONSES, RUBRICS, seed=5)
    for g, exp in zip(groups, EXPECTED):
        np.testing.assert_array_equal(g.scores, exp)
        assert g.valid.all()
    assert (groups[1].retried, groups[1].recovered) == (2, 2)


def test_every_request_failing_raises(server):
    base, state = server
    state["script"] = lambda r, ids, body, auth: 503
    with pytest.raises(RemoteJudgeUnavailable, match="all 6 requests .* failed.*endpoint looks down"):
        scorer_for(base).score(PROMPTS, RESPONSES, RUBRICS, seed=0)
    nobody = RemoteScorer(ChatClient(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=0))
    with pytest.raises(RemoteJudgeUnavailable, match="connection error"):
        nobody.score(PROMPTS[:1], RESPONSES[:1], RUBRICS[:1], seed=0)


def test_the_api_key_never_leaks(server, monkeypatch, caplog):
    base, state = server
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG, logger="rubric_jax")

    def script(r, ids, body, auth):
        if r == "answer g0r2":
            return 500  # its error message quotes the Authorization header
        if r == "answer g1r0":
            return f"I was sent {auth}; no grades."  # an unreadable answer quoting it
        return good_answer(r, ids)

    state["script"] = script
    scorer = RemoteScorer.from_spec(f"openai:judge-model@{base}", timeout_s=10, concurrency=3, max_retries=0)
    groups = scorer.score(PROMPTS, RESPONSES, RUBRICS, seed=1)
    assert state["seen"][0]["auth"] == f"Bearer {SECRET}"  # it was sent, so it could have leaked
    assert not groups[0].valid[2].any() and not groups[1].valid[0].any()
    assert "overloaded" in caplog.text and "unreadable" in caplog.text  # the failures were logged...
    assert SECRET not in caplog.text and "I was sent Bearer ***" in caplog.text  # ...without the key
    assert SECRET not in repr(groups) + repr(scorer) + str(vars(scorer)) + repr(vars(scorer.verdicts.client))

    state["script"] = lambda r, ids, body, auth: 500
    with pytest.raises(RemoteJudgeUnavailable) as e:
        scorer.score(PROMPTS, RESPONSES, RUBRICS, seed=1)
    assert SECRET not in str(e.value) and "overloaded" in str(e.value)
    assert SECRET not in caplog.text


def test_from_spec(server):
    base, state = server
    spec = f"openai:judge-model@{base}"
    s = RemoteScorer.from_spec(spec, timeout_s=5, concurrency=2, max_new_tokens=64, max_retries=0,
                               temperature=0.2, max_response_chars=1000)
    r = s.verdicts  # the RemoteJudge behind the scorer
    assert s.judge is None and r.model_id == spec and r.client.concurrency == 2 and r.client.timeout_s == 5
    assert (r.max_new_tokens, r.temperature, r.max_response_chars, r.retry) == (64, 0.2, 1000, True)
    s.score(PROMPTS[:1], RESPONSES[:1], RUBRICS[:1], seed=0)
    assert {(x["body"]["max_tokens"], x["body"]["temperature"]) for x in state["seen"]} == {(64, 0.2)}
    with pytest.raises(ValueError, match="openai:MODEL@BASE_URL"):
        RemoteScorer.from_spec("judge-model", timeout_s=5, concurrency=2, max_new_tokens=64)


# ---- our own server (rubric_jax.serve) --------------------------------------------------------------------------

@pytest.mark.slow
def test_against_our_own_server(tmp_path_factory):
    """The whole HTTP path against `python -m rubric_jax.serve` (this test process' shared server, a tiny
    random model): whatever it answers, a cell is either an allowed score or invalid and 0. (Against the
    embedded SmolLM2 the same test found 0 of 4 cells valid: the 135M model does not follow the format.)"""
    from serve_fixture import shared_server

    base = shared_server(tmp_path_factory)[0]
    scorer = RemoteScorer.from_spec(f"openai:tiny@{base}", timeout_s=300, concurrency=2, max_new_tokens=32,
                                    max_retries=0)
    rubric = Rubric("r", (FACTS, STYLE))
    responses = [["The Moon's gravity pulls the oceans, making two bulges that the Earth turns under.",
                  "tides happen because fish swim together"]]
    g = scorer.score(["Explain tides in one sentence."], responses, [rubric], seed=0)[0]
    assert g.scores.shape == g.valid.shape == (2, 2) and g.scores.dtype == np.int32
    np.testing.assert_array_equal(g.max_points, [3, 4])
    for j, c in enumerate(rubric.criteria):
        assert all(int(s) in c.scores for s in g.scores[g.valid[:, j], j])  # a valid cell holds an allowed score
    assert (g.scores[~g.valid] == 0).all()  # an unreadable one is invalid and 0, never a guess
    assert g.retried == int((~g.valid).sum()) + g.recovered
    print(f"\nserved model as a remote RARE judge: {int(g.valid.sum())} of {g.valid.size} cells valid "
          f"(retried {g.retried}, recovered {g.recovered}); scores {g.scores.tolist()}, valid {g.valid.tolist()}")
