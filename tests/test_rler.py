"""The RLER baseline's per-query step (rubric_jax/rare/rler.py) with a scripted judge and writer: rewards against
a hand computation, the std filter and pool limit, the pool and the dropped criteria carried across visits, and
the shape of the writer's "propose" requests."""

import json

import numpy as np
import pytest

from rubric_jax.rare import rler as RL
from rubric_jax.rare.scoring import GroupScores
from rubric_jax.rare.writer import WriteOutcome
from rubric_jax.rubrics import Criterion, Rubric

XLA_OPTIMIZED = True  # its runs train several steps (conftest._xla_optimisation)


def crit(cid, m, scoring="levels"):
    levels = ("absent", "present") if scoring == "binary" else tuple(f"{cid} level {k}" for k in range(m + 1))
    return Criterion(cid, cid.title(), f"check {cid}", levels, max_points=m, scoring=scoring)


INITIAL = Rubric("q1", (crit("i1", 1, "binary"), crit("i2", 2)))


class ScriptedScorer:
    """Scores from a table {criterion id: score per response index}; None = an unreadable cell, which holds the
    criterion's maximum under valid=False so that only the mask can make it score 0. Records the ids of every
    rubric it is asked to score, one list per call."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def score(self, prompts, responses, rubrics, *, seed):
        self.calls.append([list(r.ids) for r in rubrics])
        out = []
        for resps, rub in zip(responses, rubrics):
            s = np.zeros((len(resps), len(rub)), np.int32)
            v = np.ones_like(s, bool)
            for j, cid in enumerate(rub.ids):
                for g, x in enumerate(self.table[cid][:len(resps)]):
                    v[g, j] = x is not None
                    s[g, j] = rub[cid].max_points if x is None else x
            out.append(GroupScores(s, v, np.asarray(rub.max_points, np.int32)))
        return out


class ScriptedWriter:
    """Fills every slot of a request with a criterion of the slot's id and scale, or fails the request when
    `fail` says so. Reads only query/rubric/eligible from the request; keeps every batch it was given."""

    def __init__(self, fail=lambda request: False):
        self.fail, self.batches = fail, []

    def __call__(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            if self.fail(r):
                out.append(WriteOutcome(None, attempts=3, errors=["rejected 1", "rejected 2", "rejected 3"]))
            else:
                out.append(WriteOutcome({c: crit(c, r.rubric[c].max_points) for c in r.eligible}, attempts=1))
        return out


RESP = [["r0", "r1", "r2", "r3"]]


def run(scorer, writer, pools, inactive, *, step_index, cfg=RL.RlerConfig(), initial=(INITIAL,), keys=("q1",),
        responses=RESP, prompts=("q",)):
    return RL.step(list(prompts), responses, list(initial), pools, inactive, list(keys), scorer=scorer, write=writer,
                   cfg=cfg, step_index=step_index, seed=step_index)


def test_config_is_validated():
    assert RL.RlerConfig() == RL.RlerConfig(new=3, pool=5, max_points=3)
    for kw, field in (({"new": 0}, "rler.new"), ({"new": 6}, "rler.new"), ({"pool": 0}, "rler.pool"),
                      ({"max_points": 0}, "rler.max_points"), ({"max_points": 10}, "rler.max_points"),
                      ({"new": 2.0}, "rler.new")):
        with pytest.raises(ValueError, match=field):
            RL.RlerConfig(**kw)


def test_rewards_count_new_criteria_at_once_and_invalid_cells_as_zero():
    table = {"i1": [1, 1, 1, 1],  # initial, flat: scored but never filtered
             "i2": [2, 1, None, 0],  # initial, spread: never enters the pool
             "p1": [3, 3, 3, 3],  # pool, flat: dropped
             "rler_7_0": [0, 1, 2, 3],  # new, spread: kept
             "rler_7_1": [1, None, 1, 1]}  # new, flat over its valid cells: dropped
    scorer, writer = ScriptedScorer(table), ScriptedWriter()
    res = run(scorer, writer, [(crit("p1", 3),)], [()], step_index=7, cfg=RL.RlerConfig(new=2))
    # by hand: every criterion over 1 + 2 + 3 + 3 + 3 = 12 points, the unreadable cells scoring 0
    np.testing.assert_allclose(res.rewards[0], [7 / 12, 6 / 12, 7 / 12, 8 / 12], atol=1e-7)
    np.testing.assert_allclose(res.rewards_initial[0], [3 / 3, 2 / 3, 1 / 3, 1 / 3], atol=1e-7)
    assert res.rewards.dtype == np.float32 and res.rewards.shape == (1, 4)
    # one judge pass on initial + pool + new
    assert scorer.calls == [[["i1", "i2", "p1", "rler_7_0", "rler_7_1"]]]
    assert [c.id for c in res.pools[0]] == ["rler_7_0"] and [c.id for c in res.dropped[0]] == ["p1", "rler_7_1"]
    assert res.status.tolist() == [RL.WRITTEN]
    ev = res.events[0]
    json.dumps(ev, allow_nan=False)
    assert ev["key"] == "q1" and ev["step"] == 7 and ev["status"] == "written" and ev["attempts"] == 1
    assert [c["id"] for c in ev["added"]] == ["rler_7_0", "rler_7_1"]
    assert [(d["criterion"]["id"], d["std"], d["reason"]) for d in ev["dropped"]] == [
        ("p1", 0.0, "zero_std"), ("rler_7_1", 0.0, "zero_std")]
    assert ev["pool"] == [{"id": "rler_7_0", "std": pytest.approx(np.std([0, 1, 2, 3]))}]
    m = RL.step_metrics(res)
    assert m == {"rler/writer_failure_rate": 0.0, "rler/added": 2.0, "rler/pool_size": 1.0, "rler/dropped": 2.0,
                 "rler/kept_std": pytest.approx(np.std([0, 1, 2, 3])), "rler/all_zero_std_rate": 0.0}


def test_criterion_stds_and_select_pool():
    s = np.array([[0, 2, 1, 3], [2, 2, 1, 0], [1, 2, 0, 0]])
    v = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], bool)
    sd = RL.criterion_stds(s, v)
    # population std over the valid cells; a flat column is exactly 0, one valid cell is NaN
    np.testing.assert_allclose(sd[:3], [np.std([0, 2, 1]), 0.0, np.std([1, 0])])
    assert sd[1] == 0.0 and np.isnan(sd[3])

    cands = [crit(f"c{k}", 3) for k in range(8)]
    stds = [0.5, 0.0, 1.0, 0.5, 2.0, 0.8, 0.5, np.nan]
    kept, dropped = RL.select_pool(cands, stds, 5)
    # the top five by std (2.0, 1.0, 0.8, 0.5, 0.5): of the three at 0.5 the two earlier ones win the tie
    assert [c.id for c in kept] == ["c0", "c2", "c3", "c4", "c5"]
    assert [c.id for c in dropped] == ["c1", "c6", "c7"]  # zero std, lost the tie, too few valid cells
    kept, dropped = RL.select_pool(cands[:7], stds[:7], 7)  # room for everything: only the zero std goes
    assert [c.id for c in dropped] == ["c1"] and len(kept) == 6
    with pytest.raises(ValueError, match="stds"):
        RL.select_pool(cands, stds[:3], 5)


def test_pool_and_dropped_criteria_carry_across_visits_and_a_failed_writer_still_filters():
    cfg = RL.RlerConfig(new=3, pool=5)
    base = {"i1": [1, 0, 1, 0], "i2": [2, 2, 2, 2]}
    # visit 1 (step 3): three new criteria, one of them flat
    v1 = ScriptedScorer(base | {"rler_3_0": [0, 1, 2, 3], "rler_3_1": [2, 2, 2, 2], "rler_3_2": [3, 3, 1, 1]})
    res1 = run(v1, ScriptedWriter(), [()], [()], step_index=3, cfg=cfg)
    pool, inactive = list(res1.pools), [() + res1.dropped[0]]  # what a caller keeps per query
    assert [c.id for c in pool[0]] == ["rler_3_0", "rler_3_2"] and [c.id for c in inactive[0]] == ["rler_3_1"]

    # visit 2 (step 5): the writer fails; the pool is scored alone and rler_3_2 is flat this time
    writer = ScriptedWriter(fail=lambda r: True)
    v2 = ScriptedScorer(base | {"rler_3_0": [3, 0, 0, 0], "rler_3_2": [1, 1, 1, 1]})
    res2 = run(v2, writer, pool, inactive, step_index=5, cfg=cfg)
    assert [c.id for c in writer.batches[0][0].inactive] == ["rler_3_1"]  # the dropped one, shown to the writer
    assert v2.calls == [[["i1", "i2", "rler_3_0", "rler_3_2"]]]
    np.testing.assert_allclose(res2.rewards[0], [7 / 9, 3 / 9, 4 / 9, 3 / 9], atol=1e-7)  # over 1 + 2 + 3 + 3
    assert res2.status.tolist() == [RL.WRITER_FAILED] and res2.added == [()]
    assert [c.id for c in res2.pools[0]] == ["rler_3_0"] and [c.id for c in res2.dropped[0]] == ["rler_3_2"]
    ev = res2.events[0]
    assert ev["status"] == "writer_failed" and ev["added"] == [] and ev["attempts"] == 3 and len(ev["errors"]) == 3
    m = RL.step_metrics(res2)
    assert m["rler/writer_failure_rate"] == 1.0 and m["rler/added"] == 0.0 and m["rler/dropped"] == 1.0
    inactive = [inactive[0] + res2.dropped[0]]

    # visit 3 (step 8): new ids never reuse one the query has had; both dropped criteria reach the writer
    writer = ScriptedWriter()
    v3 = ScriptedScorer(base | {"rler_3_0": [1, 1, 1, 1]} | {f"rler_8_{k}": [1, 1, 1, 1] for k in range(3)})
    res3 = run(v3, writer, list(res2.pools), inactive, step_index=8, cfg=cfg)
    req = writer.batches[0][0]
    assert [c.id for c in req.inactive] == ["rler_3_1", "rler_3_2"]
    history = {c.id for r in (res1, res2, res3) for a in r.added for c in a}
    assert len(history) == len([c for r in (res1, res2, res3) for a in r.added for c in a]) == 6
    assert req.eligible == ("rler_8_0", "rler_8_1", "rler_8_2")
    # every adaptive criterion flat: the pool empties and the metric says so
    assert res3.pools == [()] and RL.step_metrics(res3)["rler/all_zero_std_rate"] == 1.0


def test_slot_ids_skip_taken_ids_and_a_query_twice_in_one_batch_gets_distinct_slots():
    assert RL.slot_ids(3, 2) == ("rler_3_0", "rler_3_1")
    assert RL.slot_ids(3, 2, taken={"rler_3_0"}) == ("rler_3_1", "rler_3_2")
    writer = ScriptedWriter()
    scorer = ScriptedScorer({"i1": [1, 0], "i2": [0, 2]} | {f"rler_4_{k}": [0, 1] for k in range(4)})
    res = run(scorer, writer, [(), ()], [(), ()], step_index=4, cfg=RL.RlerConfig(new=2), initial=(INITIAL, INITIAL),
              keys=("q1", "q1"), responses=[["a", "b"], ["c", "d"]], prompts=("q", "q"))
    assert [r.eligible for r in writer.batches[0]] == [("rler_4_0", "rler_4_1"), ("rler_4_2", "rler_4_3")]
    assert len(res.pools[0] + res.pools[1]) == 4


def test_requests_propose_slots_after_the_initial_criteria_and_the_pool():
    cfg = RL.RlerConfig(new=4, pool=5, max_points=2)
    pool_a, pool_b = (crit("pa", 2), crit("pb", 3)), ()
    other = Rubric("q2", (crit("j1", 4),))
    table = {"i1": [1, 0], "i2": [2, 1], "j1": [4, 0], "pa": [2, 0], "pb": [3, 1]} | {
        f"rler_9_{k}": [k % 3, 0] for k in range(4)}
    writer, scorer = ScriptedWriter(), ScriptedScorer(table)
    run(scorer, writer, [pool_a, pool_b], [(crit("old", 2),), ()], step_index=9, cfg=cfg,
              initial=(INITIAL, other), keys=("q1", "q2"), responses=[["a", "b"], ["c", "d"]], prompts=("p1", "p2"))
    assert len(writer.batches) == 1 and len(writer.batches[0]) == 2  # one batched writer call
    assert len(scorer.calls) == 1 and len(scorer.calls[0]) == 2  # one batched judge call
    for req, init, pool, prompt, gone in zip(writer.batches[0], (INITIAL, other), (pool_a, pool_b), ("p1", "p2"),
                                             (["old"], [])):
        slots = tuple(f"rler_9_{k}" for k in range(4))
        assert req.mode == "propose" and req.direction == "any" and req.query == prompt
        assert req.eligible == slots and req.count == 4
        assert req.retained == init.criteria + pool  # initial, then pool, then the slots
        assert req.rubric.ids == init.ids + tuple(c.id for c in pool) + slots
        assert all(req.rubric[s].max_points == 2 for s in slots)
        assert [c.id for c in req.inactive] == gone
        assert req.scores.shape == req.valid.shape == (2, len(req.rubric)) and not req.valid.any()
    assert scorer.calls[0][1] == ["j1", "rler_9_0", "rler_9_1", "rler_9_2", "rler_9_3"]


def test_an_answer_off_its_slot_counts_as_a_writer_failure():
    def write(requests):  # a criterion on the wrong scale: it would break the slot's reward share
        return [WriteOutcome({c: crit(c, 5) for c in r.eligible}, attempts=1) for r in requests]

    res = run(ScriptedScorer({"i1": [1, 0, 1, 0], "i2": [2, 2, 2, 2]}), write, [()], [()], step_index=2)
    assert res.status.tolist() == [RL.WRITER_FAILED] and res.added == [()] and res.pools == [()]
    assert any("max_points 3" in e for e in res.events[0]["errors"])


# ---- the trainer path ------------------------------------------------------------------------------------------

class SpreadScorer:
    """Initial criteria: full marks; written ones ("rler_..."): max on even rollouts, 0 on odd, so each stays
    in its query's pool. Records the ids it scored per group."""

    def __init__(self, judge):
        self.judge, self.seen = judge, []

    def score(self, prompts, responses, rubrics, *, seed):
        out = []
        for resps, rub in zip(responses, rubrics):
            self.seen.append(rub.ids)
            m = np.asarray(rub.max_points, np.int32)
            s = np.tile(m, (len(resps), 1))
            for j, cid in enumerate(rub.ids):
                if cid.startswith("rler_"):
                    s[1::2, j] = 0
            out.append(GroupScores(s, np.ones_like(s, bool), m))
        return out


@pytest.mark.slow
def test_trainer_grows_the_pools_and_they_survive_a_kill(tiny_qwen3, tmp_path, monkeypatch):
    """configs/rler.py:tiny (one criterion written per visit) with a scripted judge and writer: both queries are
    visited every step, so their pools grow by one per step; a run killed in step 2 restores the pools from the
    checkpoint and ends exactly like an uninterrupted one."""
    from rubric_jax.methods import rare as rare_phase
    from rubric_jax.rl import trainer
    from rubric_jax.rl.checkpoint import Checkpointer
    from rubric_jax.rl.metrics import read_metrics
    from test_rare import _rare_records
    from test_trainer import _tiny_run_config, kill_then_resume

    data = _rare_records(tmp_path / "data.jsonl")
    scorers = []

    def make_scorer(judge, retry, mode):
        scorers.append(SpreadScorer(judge))
        return scorers[-1]

    monkeypatch.setattr(rare_phase, "RubricScorer", make_scorer)
    monkeypatch.setattr(rare_phase, "make_writer", lambda rc, model, tok, seed: ScriptedWriter())
    cfg = lambda: _tiny_run_config("rler", tiny_qwen3[0], steps=3, **{"data.path": data})  # noqa: E731
    straight, resumed = str(tmp_path / "a"), str(tmp_path / "b")
    trainer.train(cfg(), straight)
    ma = read_metrics(straight)
    # 3 initial criteria per query, plus the pool (0, 1, 2) and the one written this visit
    assert [m["active_criteria"] for m in ma] == [4.0, 5.0, 6.0]
    assert [m["rler/pool_size"] for m in ma] == [1.0, 2.0, 3.0]
    assert scorers[-1].seen[-1][-3:] == ("rler_0_0", "rler_1_0", "rler_2_0")

    kill_then_resume(monkeypatch, lambda: trainer.train(cfg(), resumed), 2)
    assert scorers[-1].seen == [ids for ids in scorers[0].seen[-2:]]  # step 2 scored the restored pools
    for x, y in zip(ma, read_metrics(resumed)):
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], abs=1e-6), (x["step"], k)
    _, meta = Checkpointer(resumed).restore()
    assert {k: [c["id"] for c in v] for k, v in meta["rler"]["pools"].items()} == \
        {q: ["rler_0_0", "rler_1_0", "rler_2_0"] for q in ("q0", "q1")}
    texts = [json.loads(x) for x in open(f"{resumed}/texts.jsonl")]
    assert any(k.startswith("rare/rler_") for t in texts for k in t)
