"""RARE's sample-level step and rubric store with a scripted judge and writer (the model-free parts), against
hand-computed rewards and statistics; the trainer path with a kill and resume."""

import json
import os

import numpy as np
import pytest

from rubric_jax.data import PromptRecord
from rubric_jax.rare import sample_level as SL
from rubric_jax.rare.scoring import GroupScores
from rubric_jax.rare.store import RubricStore
from rubric_jax.rare.writer import WriteOutcome
from rubric_jax.rubrics import Criterion, Rubric

XLA_OPTIMIZED = True  # its scoring runs over whole groups (conftest._xla_optimisation)


def crit(cid, m, check, scoring="binary", polarity="positive"):
    levels = ("absent", "present") if scoring == "binary" else tuple(f"level {k}" for k in range(m + 1))
    return Criterion(cid, cid.title(), check, levels, max_points=m, polarity=polarity, scoring=scoring)


RUBRIC = Rubric("q1", (crit("a", 2, "check a"), crit("b", 3, "check b"), crit("c", 1, "check c")))
NEW_A = crit("a", 2, "no clutter in the opening shot", scoring="levels", polarity="negative")


class ScriptedScorer:
    """Scores by criterion check text from a table {check: scores over the G responses}; None = unreadable."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def score(self, prompts, responses, rubrics, *, seed):
        self.calls.append([[c.check for c in r.criteria] for r in rubrics])
        out = []
        for resps, rub in zip(responses, rubrics):
            s = np.zeros((len(resps), len(rub)), np.int32)
            v = np.ones_like(s, bool)
            for j, c in enumerate(rub.criteria):
                col = self.table[c.check]
                for g in range(len(resps)):
                    if col[g] is None:
                        v[g, j] = False
                    else:
                        s[g, j] = col[g]
            out.append(GroupScores(np.where(v, s, 0), v, np.asarray(rub.max_points, np.int32)))
        return out


TABLE = {"check a": [2, 2, 2, 2], "check b": [3, 0, 3, 0], "check c": [1, 1, 0, 1],
         "no clutter in the opening shot": [2, 1, 0, 2]}
RESPONSES = [["r0", "r1", "r2", "r3"]]


def scripted_writer(answer, seen=None):
    def write(requests):
        if seen is not None:
            seen.extend(requests)
        return [WriteOutcome(replacements=answer, attempts=1) for _ in requests]
    return write


@pytest.mark.slow
def test_saturated_criterion_is_replaced_and_rescored_on_the_same_responses():
    scorer, seen = ScriptedScorer(TABLE), []
    res = SL.step(["q"], RESPONSES, [RUBRIC], ["q1"], scorer=scorer, write=scripted_writer({"a": NEW_A}, seen),
                  cfg=SL.SampleLevelConfig("negative", 3), step_index=7, seed=7)
    # by hand: r = (a + b + c) / 6 before, the rescored a' replaces a after
    np.testing.assert_allclose(res.rewards_before[0], [6 / 6, 3 / 6, 5 / 6, 3 / 6], atol=1e-7)
    np.testing.assert_allclose(res.rewards[0], [6 / 6, 2 / 6, 3 / 6, 3 / 6], atol=1e-7)
    assert res.status.tolist() == [SL.ACCEPTED]
    # the writer saw exactly the saturated criterion, b = min(3, 1); the rescoring judged only the new one
    assert seen[0].eligible == ("a",) and seen[0].count == 1 and seen[0].direction == "negative"
    assert scorer.calls[1] == [["no clutter in the opening shot"]]
    ev = res.events[0]
    assert ev["key"] == "q1" and ev["step"] == 7 and set(ev["replaced"]) == {"a"}
    assert ev["replaced"]["a"]["old"]["check"] == "check a" and ev["replaced"]["a"]["new"]["check"] == NEW_A.check
    assert ev["scores_before"] == [[2], [2], [2], [2]] and ev["scores_after"] == [[2], [1], [0], [2]]
    # Table 3(a) on the replacement block y = a'/2 = [1, .5, 0, 1]
    y = np.array([1, .5, 0, 1])
    st = ev["stats"]
    assert st["score"] == pytest.approx(y.mean()) and st["headroom"] == pytest.approx(1 - y.mean())
    assert st["variance"] == pytest.approx(y.var()) and st["restores_variance"] and st["opens_headroom"]
    assert st["mean_abs_adv"] == pytest.approx(np.abs((y - y.mean()) / (y.std() + 1e-6)).mean(), rel=1e-5)
    assert ev["stats_by_polarity"]["negative"]["headroom_rate"] == 1.0 and "positive" not in ev["stats_by_polarity"]
    json.dumps(ev)  # the event is JSON-able (checkpoint, texts.jsonl)
    m = SL.step_metrics(res.status, res.events, 0, 0)
    assert m["rare/event_rate"] == 1.0 and m["rare/replacement_score"] == pytest.approx(y.mean())


def test_budget_caps_the_request_and_unsaturated_groups_are_left_alone():
    four = Rubric("q", tuple(crit(x, 1, f"check {x}") for x in "pqrs") + (crit("t", 2, "check t"),))
    table = {f"check {x}": [1, 1] for x in "pqrs"} | {"check t": [2, 0]}
    seen = []
    SL.step(["q"], [["x", "y"]], [four], ["k"], scorer=ScriptedScorer(table), write=scripted_writer(None, seen),
            cfg=SL.SampleLevelConfig("mixed", 3), step_index=0, seed=0)
    assert seen[0].eligible == ("p", "q", "r", "s") and seen[0].count == 3
    # an invalid score makes its criterion ineligible; a uniformly low one is not saturated
    table = {"check a": [2, None, 2, 2], "check b": [0, 0, 0, 0], "check c": [1, 1, 0, 1]}
    seen = []
    res = SL.step(["q"], RESPONSES, [RUBRIC], ["q1"], scorer=ScriptedScorer(table), write=scripted_writer(None, seen),
                  cfg=SL.SampleLevelConfig(), step_index=0, seed=0)
    assert seen == [] and res.status.tolist() == [SL.NOT_TRIGGERED]
    np.testing.assert_allclose(res.rewards[0], [3 / 6, 1 / 6, 2 / 6, 3 / 6])  # the invalid cell counts 0


def test_failed_writer_or_unreadable_rescore_keeps_the_old_rewards():
    res = SL.step(["q"], RESPONSES, [RUBRIC], ["q1"], scorer=ScriptedScorer(TABLE), write=scripted_writer(None),
                  cfg=SL.SampleLevelConfig(), step_index=0, seed=0)
    assert res.status.tolist() == [SL.WRITER_FAILED] and not res.events
    np.testing.assert_array_equal(res.rewards, res.rewards_before)
    bad = dict(TABLE, **{"no clutter in the opening shot": [2, None, 0, 2]})
    res = SL.step(["q"], RESPONSES, [RUBRIC], ["q1"], scorer=ScriptedScorer(bad), write=scripted_writer({"a": NEW_A}),
                  cfg=SL.SampleLevelConfig(), step_index=0, seed=0)
    assert res.status.tolist() == [SL.RESCORE_FAILED] and not res.events
    np.testing.assert_array_equal(res.rewards, res.rewards_before)
    # static: scores only, never asks the writer
    res = SL.step(["q"], RESPONSES, [RUBRIC], ["q1"], scorer=ScriptedScorer(TABLE), write=None,
                  cfg=SL.SampleLevelConfig(), step_index=0, seed=0)
    assert res.status.tolist() == [SL.NOT_TRIGGERED]


@pytest.mark.slow
def test_store_sources_events_and_state_round_trip(tmp_path):
    rec = PromptRecord(id="q1", prompt="p", task="script_live_action", rubric=RUBRIC.to_dict())
    plain = PromptRecord(id="q2", prompt="p2")
    default = Rubric("default", (crit("z", 1, "check z"),))
    store = RubricStore(default, "record")
    assert store.get(rec) == RUBRIC and store.get(plain) == default
    assert RubricStore(default, "task").get(rec).name == "script_live_action"
    assert RubricStore(default, "config").get(rec) == default
    res = SL.step(["p"], RESPONSES, [RUBRIC], ["q1"], scorer=ScriptedScorer(TABLE), write=scripted_writer({"a": NEW_A}),
                  cfg=SL.SampleLevelConfig(), step_index=3, seed=3)
    assert store.apply_event(res.events[0], rec)
    new = store.get(rec)
    assert new["a"] == NEW_A and new.version == RUBRIC.version + 1 and new["b"] == RUBRIC["b"]
    assert not store.apply_event(res.events[0], rec)  # its "old" criterion is gone: a second copy is skipped
    state = json.loads(json.dumps(store.state()))
    again = RubricStore(default, "record")
    again.set_state(state)
    assert again.get(rec) == new and again.history("q1")[0]["step"] == 3
    with pytest.raises(ValueError, match="rubric_source"):
        RubricStore(default, "task").set_state(state)
    store.export_jsonl(tmp_path / "rubrics.jsonl")
    line = json.loads((tmp_path / "rubrics.jsonl").read_text().splitlines()[0])
    assert line["query"] == "q1" and line["rubric"]["criteria"][0]["check"] == NEW_A.check
    assert line["history"][0]["replaced"]["a"]["old"]["check"] == "check a"


def test_resaturation_counts_earlier_replacements_saturated_again():
    g = GroupScores(np.array([[2, 3, 1], [2, 0, 1]]), np.ones((2, 3), bool), np.array([2, 3, 1]))
    assert SL.resaturation(RUBRIC, g, {"a", "b"}) == (2, 1)
    assert SL.resaturation(RUBRIC, g, set()) == (0, 0)


# ---------------------------------------------------------------------------------------------
# The trainer's RARE path: the real loop, model and checkpoints; the judge and writer scripted (their real
# implementations are tested in test_judge.py and test_rare_writer.py).

class CheckScorer:
    """Initial criteria ("check ...") always get full marks (saturated); a revised one gets max on even
    responses and 0 on odd ones. Records every rubric it was asked to score under."""

    def __init__(self, judge):
        self.judge, self.seen = judge, []

    def score(self, prompts, responses, rubrics, *, seed):
        out = []
        for resps, rub in zip(responses, rubrics):
            self.seen.append([c.check for c in rub.criteria])
            m = np.asarray(rub.max_points, np.int32)
            s = np.tile(m, (len(resps), 1))
            for j, c in enumerate(rub.criteria):
                if c.check.startswith("revised"):
                    s[1::2, j] = 0
            out.append(GroupScores(s, np.ones_like(s, bool), m))
        return out


def revising_writer(requests):
    outs = []
    for r in requests:
        cid = r.eligible[0]
        m = r.rubric[cid].max_points
        new = Criterion(cid, "Revised", f"revised {cid} for {r.query[:12]}", tuple(f"l{k}" for k in range(m + 1)),
                        max_points=m, polarity="negative")
        outs.append(WriteOutcome(replacements={cid: new}, attempts=1))
    return outs


def _rare_records(path):
    with open(path, "w") as f:
        for q in range(2):
            rub = Rubric(f"q{q}", tuple(crit(f"c{k}", k + 1, f"check {q}.{k}") for k in range(3)))
            f.write(json.dumps({"id": f"q{q}", "prompt": f"Write a short scene number {q}.",
                                "rubric": rub.to_dict()}) + "\n")
    return str(path)


@pytest.mark.slow
def test_trainer_replaces_and_the_store_survives_a_kill(tiny_qwen3, tmp_path, monkeypatch):
    from rubric_jax.methods import rare as rare_phase
    from rubric_jax.rl import trainer
    from rubric_jax.rl.checkpoint import Checkpointer
    from rubric_jax.rl.metrics import read_metrics
    from test_trainer import _tiny_run_config, kill_then_resume

    data = _rare_records(tmp_path / "data.jsonl")
    scorers = []

    def make_scorer(judge, retry, mode):
        scorers.append(CheckScorer(judge))
        return scorers[-1]

    monkeypatch.setattr(rare_phase, "RubricScorer", make_scorer)
    monkeypatch.setattr(rare_phase, "make_writer", lambda rc, model, tok, seed: revising_writer)
    cfg = lambda: _tiny_run_config("rare", tiny_qwen3[0], steps=3, **{"data.path": data})  # noqa: E731
    straight, resumed = str(tmp_path / "a"), str(tmp_path / "b")
    trainer.train(cfg(), straight)
    full = lambda seen: [checks for checks in seen if len(checks) == 3]  # noqa: E731 (not the rescoring calls)
    seen_straight = full(scorers[-1].seen)

    kill_then_resume(monkeypatch, lambda: trainer.train(cfg(), resumed), 2)
    seen_resumed = full(scorers[-1].seen)  # the resumed process' scorer: step 2 only

    # every visit replaced one more saturated criterion of each query (budget 1 in :tiny)
    ma, mb = read_metrics(straight), read_metrics(resumed)
    assert [m["rare/event_rate"] for m in ma] == [1.0, 1.0, 1.0]
    revised_in_step_2 = [sum(c.startswith("revised") for c in checks) for checks in seen_straight[-2:]]
    assert revised_in_step_2 == [2, 2]  # the rubric that scored step 2 carried both earlier replacements
    # the resumed run restored the store from the checkpoint: step 2 saw exactly the same rubrics
    assert seen_resumed == seen_straight[-2:]
    for x, y in zip(ma, mb):
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], abs=1e-6), (x["step"], k)
    _, meta = Checkpointer(resumed).restore()
    assert set(meta["rubrics"]["revised"]) == {"q0", "q1"}
    assert all(len(v["history"]) == 3 for v in meta["rubrics"]["revised"].values())
    for wd in (straight, resumed):
        lines = [json.loads(x) for x in open(os.path.join(wd, "rubrics.jsonl"))]
        assert [len(x["history"]) for x in lines] == [3, 3]
        assert all(c["check"].startswith("revised") for x in lines for c in x["rubric"]["criteria"])
        texts = [json.loads(x) for x in open(os.path.join(wd, "texts.jsonl"))]
        assert [t["step"] for t in texts] == [0, 1, 2]  # a resumed run does not duplicate the texts
        ev = json.loads(texts[0]["rare/replacement_0"])
        assert ev["scores_before"] != ev["scores_after"] and ev["replaced"]
