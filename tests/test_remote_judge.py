"""The remote backend of the one door to a verdict (`rubric_jax.judge.remote.RemoteJudge`): pairwise, pointwise
and verify results of the same types as the local Judge's, from a scripted chat client, checked against values
computed by hand; and both backends answer the `Verdicts` protocol. The HTTP path itself is tested against real
servers in test_rare_remote_scorer.py (pointwise) and test_openai_client.py (pairwise, through evals.judges)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from rubric_jax.judge import Judge, PairwiseResult, PointwiseResult, RemoteJudge, Verdicts, VerifyResult
from rubric_jax.openai_client import Completion
from rubric_jax.rewards_api import score_groups
from rubric_jax.rubrics import Criterion

CLEAR = Criterion(id="clear", name="Clear", check="Is it clear?")
SHORT = Criterion(id="short", name="Short", check="Is it short?")


class ScriptedClient:
    """A ChatClient stand-in: `answer(request) -> (text, top_logprobs)`; it records every request."""

    model, base_url = "scripted", "http://scripted/v1"

    def __init__(self, answer):
        self.answer, self.seen = answer, []

    def chat_many(self, requests, desc=""):
        self.seen += requests
        out = []
        for r in requests:
            text, top = self.answer(r)
            out.append(Completion(text=text, finish_reason="stop", top_logprobs=top, cached=False))
        return out


def shown(request, label):
    user = request["messages"][-1]["content"]
    return re.search(rf"### Response {label}\n(.*?)\n\n###", user, re.S).group(1)


def prefer_longer(request):
    """P(A) = sigmoid(len(A) - len(B)) from the top log-probabilities, and the letter as text."""
    d = len(shown(request, "A")) - len(shown(request, "B"))
    pa = 1 / (1 + math.exp(-d))
    return ("A" if pa >= 0.5 else "B"), [{"A": math.log(pa), "B": math.log(1 - pa)}]


def test_pairwise_batch_reads_both_orders_as_the_local_readout_does():
    client = ScriptedClient(prefer_longer)
    judge = RemoteJudge(client)
    groups = [["a", "abc", "ab"], ["xy", "x"]]
    res = judge.pairwise_batch(["task one", "task two"], groups, [CLEAR, SHORT])
    assert len(client.seen) == (3 * 2 + 2 * 1) * 2  # every ordered pair of each group, per criterion
    for resps, r in zip(groups, res):
        assert isinstance(r, PairwiseResult)
        g = len(resps)
        sig = lambda d: 1 / (1 + math.exp(-d))
        pf = np.array([[sig(len(resps[a]) - len(resps[b])) for b in range(g)] for a in range(g)])
        p = 0.5 * (pf + 1 - pf.T)  # logit mode: the two orders averaged
        np.fill_diagonal(p, 0.5)
        for c in range(2):
            np.testing.assert_allclose(r.p[..., c], p, atol=1e-5)
            np.testing.assert_allclose(r.win_rates[:, c], (p.sum(1) - 0.5) / (g - 1), atol=1e-5)
        assert r.valid[~np.eye(g, dtype=bool)].all() and r.mask.sum() == g * (g - 1)
    signed = judge.pairwise_batch(["task one"], groups[:1], [CLEAR], mode="sign")[0]
    np.testing.assert_array_equal(signed.win_rates[:, 0], [0.0, 1.0, 0.5])  # "abc" beats both, "ab" beats "a"


def test_an_unreadable_order_takes_the_other_orders_verdict_and_both_unreadable_is_a_tie():
    def answer(r):
        a, b = shown(r, "A"), shown(r, "B")
        if (a, b) == ("one", "two"):
            return "I cannot say", None  # unreadable: the other order decides
        if {a, b} == {"one", "three"}:
            return "no idea", None  # both orders unreadable: 1/2
        return ("A", None) if a < b else ("B", None)  # text only, alphabetical order wins: P(A) is 1 or 0

    res = RemoteJudge(ScriptedClient(answer)).pairwise("t", ["one", "two", "three"], [CLEAR])
    assert not res.valid[0, 1, 0] and res.valid[1, 0, 0] and not res.valid[0, 2, 0]
    assert res.p[0, 1, 0] == pytest.approx(1.0, abs=1e-5)  # ("two", "one") answered B: "one" wins
    assert res.p[0, 2, 0] == pytest.approx(0.5) and res.p[2, 0, 0] == pytest.approx(0.5)


def test_remote_pairwise_refuses_what_only_the_local_engine_can_do():
    judge = RemoteJudge(ScriptedClient(prefer_longer))
    with pytest.raises(ValueError, match="listwise.*local judge"):
        judge.pairwise_batch(["t"], [["a", "b"]], [CLEAR], comparison="listwise")
    with pytest.raises(ValueError, match="Swiss"):
        judge.pairwise_batch(["t"], [["a", "b"]], [CLEAR], pairing="swiss")
    with pytest.raises(ValueError, match="mode"):
        judge.pairwise_batch(["t"], [["a", "b"]], [CLEAR], mode="generate")


def test_pointwise_and_verify_read_one_request_per_response():
    def grade(r):
        user = r["messages"][-1]["content"]
        if "constraint_1" in user:  # a verify request: keeps the first constraint, breaks the second
            return "constraint_1: 1\nconstraint_2: 0" if "good" in user else "constraint_1: maybe", None
        return "clear: 2\nshort: 1", None

    client = ScriptedClient(grade)
    judge = RemoteJudge(client, retry=False)
    rich = Criterion(id="clear", name="Clear", check="Is it clear?", levels=("no", "partly", "yes"), max_points=2)
    (pw,) = judge.pointwise_batch(["t"], [["r1", "r2"]], [rich, SHORT])
    assert isinstance(pw, PointwiseResult) and len(client.seen) == 2
    np.testing.assert_array_equal(pw.scores, [[2, 1], [2, 1]])
    assert pw.valid.all() and pw.max_points.tolist() == [2, 1]
    client.seen.clear()
    (vr,) = judge.verify_batch(["t"], [["good answer", "bad answer"]], [["Use no commas.", "End with a question."]])
    assert isinstance(vr, VerifyResult) and len(client.seen) == 2  # one request per response, both constraints
    np.testing.assert_array_equal(vr.p_pass, [[1.0, 0.0], [0.5, 0.5]])  # unreadable -> 1/2, not a penalty
    np.testing.assert_array_equal(vr.valid, [[True, True], [False, False]])
    np.testing.assert_array_equal(vr.passes, [[True, False], [True, True]])


def test_score_groups_takes_a_remote_judge():
    """The rewards API goes through the door: a RemoteJudge's win rates are the rewards, equal criteria weights."""
    judge = RemoteJudge(ScriptedClient(prefer_longer))
    out = score_groups(["t"], [["a", "abc", "ab"]], [CLEAR, SHORT], judge=judge, mode="pairwise")
    res = judge.pairwise("t", ["a", "abc", "ab"], [CLEAR, SHORT])
    np.testing.assert_allclose(out.rewards[0], res.win_rates.mean(1), atol=1e-6)
    assert out.rewards[0].argmax() == 1


def test_both_backends_answer_the_protocol():
    assert issubclass(Judge, Verdicts) and issubclass(RemoteJudge, Verdicts)
    import rubric_jax.judge as j

    assert sorted(j.__all__) == sorted(["Judge", "JudgeConfig", "PairwiseResult", "PointwiseResult", "PromptConfig",
                                        "RemoteJudge", "Verdicts", "VerifyResult", "pairwise", "pointwise"])
