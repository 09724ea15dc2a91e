"""Task-level revision in a run (RARE's task level and the MPO baseline): the evidence buffer, the revision
request, rescoring and the decision, with a scripted judge and writer; the trainer path with a kill and
resume across a revision (slow)."""

import json
import os

import numpy as np
import pytest

from rubric_jax.rare import task_level as T
from rubric_jax.rare import task_revision as TR
from rubric_jax.rare.scoring import GroupScores
from rubric_jax.rare.writer import WriteOutcome
from rubric_jax.rubrics import Criterion, Rubric

XLA_OPTIMIZED = True  # its runs train several steps (conftest._xla_optimisation)


def crit(cid, m, check, scoring="binary"):
    levels = ("absent", "present") if scoring == "binary" else tuple(f"level {k} of {cid}" for k in range(m + 1))
    return Criterion(cid, cid.title(), check, levels, max_points=m, polarity="positive", scoring=scoring)


SHARED = Rubric("shared", (crit("a", 2, "check a"), crit("b", 2, "check b")), description="short scenes")


def rewritten(rubric, tag):
    return {c.id: crit(c.id, c.max_points, f"{tag} {c.id}", scoring="levels") for c in rubric}


class TableScorer:
    """Scores a response by its text: {criterion check: {response text: score}}; records every call."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def score(self, prompts, responses, rubrics, *, seed):
        self.calls.append((list(prompts), [list(r) for r in responses], [r.ids for r in rubrics],
                           [[c.check for c in r] for r in rubrics]))
        out = []
        for resps, rub in zip(responses, rubrics):
            s = np.asarray([[self.table[c.check][text] for c in rub] for text in resps], np.int32)
            out.append(GroupScores(s, np.ones_like(s, bool), np.asarray(rub.max_points, np.int32)))
        return out


def evidence(n_queries, step=5, version=1, rewards=None):
    """One group of 4 rollouts per query; the representative (median reward) of query k is "rep k"."""
    out = []
    for k in range(n_queries):
        r = np.asarray(rewards[k] if rewards else [0.25, 0.5, 0.5, 1.0])
        resp = tuple(f"rep {k}" if i == T.representative(T.EvidenceGroup("x", 0, "", ("",) * 4, r,
                                                                         np.ones(4, bool), np.zeros((4, 2))))
                     else f"other {k}.{i}" for i in range(4))
        out.append(T.EvidenceGroup(f"q{k}", step, f"query {k}", resp, r, np.ones(4, bool),
                                   np.full((4, 2), 1, np.int32), "task:t", version))
    return out


def writer(answer, seen):
    def write(requests):
        seen.extend(requests)
        return [WriteOutcome(replacements=answer, attempts=1) for _ in requests]
    return write


def table_for(n, new_scores, old_scores=None):
    tab = {"new a": {}, "new b": {}, "check a": {}, "check b": {}}
    for k in range(n):
        tab["new a"][f"rep {k}"], tab["new b"][f"rep {k}"] = new_scores(k)
        tab["check a"][f"rep {k}"], tab["check b"][f"rep {k}"] = (old_scores or (lambda k: (1, 1)))(k)
    return tab


def test_revision_request_rescoring_and_acceptance():
    seen = []
    # old representative rewards 0.5 each (the median of [0.25, .5, .5, 1]); new: 0.25 or 0.75 alternately
    scorer = TableScorer(table_for(12, lambda k: (1, 0) if k % 2 else (1, 2)))
    rec = TR.revise("task:t", SHARED, evidence(12), 5, scorer=scorer, write=writer(rewritten(SHARED, "new"), seen),
                    cfg=TR.TaskLevelConfig("revise"), seed=0)
    assert rec["status"] == "accepted", rec
    (req,) = seen
    assert req.mode == "revise" and req.eligible == ("a", "b") and req.count == 2
    assert sorted(req.responses) == sorted(f"rep {k}" for k in range(12))  # one representative per query
    assert set(req.queries) == {f"query {k}" for k in range(12)} and len(req.notes) == 12
    assert "group mean reward 0.56" in req.notes[0]  # mean of [0.25, 0.5, 0.5, 1.0]
    # the judge rescored exactly the representatives under the rewrite (no old-rubric pass: nothing stale)
    (call,) = scorer.calls
    assert call[1] == [[r] for r in req.responses] and call[3] == [["new a", "new b"]] * 12
    assert rec["reward_before"] == [0.5] * 12
    assert sorted(set(rec["reward_after"])) == [0.25, 0.75]
    assert rec["mean_shift"] == pytest.approx(0.0) and rec["distinct_after"] == 2
    assert rec["replaced"]["a"]["old"]["check"] == "check a" and rec["replaced"]["b"]["new"]["check"] == "new b"


def test_revision_rejections_and_mpo_keeps_what_rare_rejects():
    seen = []
    up = table_for(12, lambda k: (2, 2) if k % 2 else (2, 1))  # new rewards 1.0 / 0.75: mean shift +0.375
    kw = dict(write=writer(rewritten(SHARED, "new"), seen), seed=0)
    rare = TR.revise("task:t", SHARED, evidence(12), 5, scorer=TableScorer(up), cfg=TR.TaskLevelConfig("revise"),
                     **kw)
    assert rare["status"] == "rejected" and "+0.375" in rare["reason"]
    mpo = TR.revise("task:t", SHARED, evidence(12), 5, scorer=TableScorer(up), cfg=TR.TaskLevelConfig("refine"),
                    **kw)
    assert mpo["status"] == "accepted" and mpo["mean_shift"] == pytest.approx(0.375)
    assert seen[-1].mode == "refine"
    flat = table_for(12, lambda k: (1, 1))  # every representative the same new reward
    assert TR.revise("task:t", SHARED, evidence(12), 5, scorer=TableScorer(flat), cfg=TR.TaskLevelConfig(),
                     **kw)["status"] == "rejected"
    skipped = TR.revise("task:t", SHARED, evidence(11), 5, scorer=TableScorer(up), cfg=TR.TaskLevelConfig(), **kw)
    assert skipped["status"] == "skipped" and "11 eligible queries" in skipped["reason"]
    failed = TR.revise("task:t", SHARED, evidence(12), 5, scorer=TableScorer(up), cfg=TR.TaskLevelConfig(),
                       write=writer(None, []), seed=0)
    assert failed["status"] == "writer_failed" and "replaced" not in failed


def test_representatives_scored_under_an_older_version_are_rescored_under_the_current_one():
    current = Rubric("shared", SHARED.criteria, version=2)
    # q0..q5 were scored at step 4 under version 1 (reward 0.5); under version 2 they score (2, 2) = 1.0
    ev = evidence(6, step=4, version=1) + evidence(12, step=5, version=2)[6:]
    scorer = TableScorer(table_for(12, lambda k: (2, 1), old_scores=lambda k: (2, 2)))
    rec = TR.revise("task:t", current, ev, 5, scorer=scorer, write=writer(rewritten(current, "new"), []),
                    cfg=TR.TaskLevelConfig(), seed=0)
    assert rec["stale"] == 6
    (call,) = scorer.calls
    assert call[3].count(["check a", "check b"]) == 6  # one extra pass under the current rubric, stale ones only
    by_query = dict(zip(rec["queries"], rec["reward_before"]))
    assert by_query == {f"q{k}": (1.0 if k < 6 else 0.5) for k in range(12)}


def test_evidence_buffer_keeps_the_representative_prunes_and_round_trips():
    buf = TR.EvidenceBuffer()
    buf.add(evidence(2, step=3))
    buf.add(evidence(1, step=5))
    g = buf.for_task("task:t")[0]
    assert [t for t in g.responses if t] == ["rep 0"]  # the other rollouts' texts are not kept
    again = TR.EvidenceBuffer()
    again.set_state(json.loads(json.dumps(buf.state())))
    assert again.state() == buf.state()
    buf.prune(5)  # the next step's revision looks at steps 4..6: step 3 goes
    assert {x.step for x in buf.for_task("task:t")} == {5}
    with pytest.raises(ValueError, match="version"):
        again.set_state({"version": 99, "groups": []})


def test_task_level_config_and_revision_metrics():
    with pytest.raises(ValueError, match="mode"):
        TR.TaskLevelConfig("replace")
    m = TR.revision_metrics([{"status": "accepted", "mean_shift": 0.1, "distinct_after": 3},
                             {"status": "skipped"}, {"status": "rejected", "mean_shift": 0.5, "distinct_after": 1}])
    assert m["rare/revision_attempts"] == 2 and m["rare/revision_accepted"] == 1 and m["rare/revision_skipped"] == 1
    assert m["rare/revision_mean_shift"] == pytest.approx(0.3) and m["rare/revision_distinct_rewards"] == 2


# ---- the trainer path ------------------------------------------------------------------------------------------

class SharedScorer:
    """Initial criteria: full marks on even rollouts, 0 on odd (every group has valid, spread rewards);
    revised criteria ("revised ..."): full marks, except the first criterion in every other group of a call
    (so rescored representatives, one per group, get two distinct rewards near the old ones). Records the
    checks per group."""

    def __init__(self, judge):
        self.judge, self.seen = judge, []

    def score(self, prompts, responses, rubrics, *, seed):
        out = []
        for b, (resps, rub) in enumerate(zip(responses, rubrics)):
            self.seen.append(tuple(c.check for c in rub))
            m = np.asarray(rub.max_points, np.int32)
            s = np.tile(m, (len(resps), 1))
            for j, c in enumerate(rub):
                if not c.check.startswith("revised"):
                    s[1::2, j] = 0
                elif j == 0 and b % 2:
                    s[:, j] = 0
            out.append(GroupScores(s, np.ones_like(s, bool), m))
        return out


def revising_writer(requests):
    outs = []
    for r in requests:
        outs.append(WriteOutcome(replacements={c.id: Criterion(c.id, "Revised", f"revised {c.id} at {len(r.queries)}",
                                                               tuple(f"l{k}" for k in range(c.max_points + 1)),
                                                               max_points=c.max_points) for c in r.rubric},
                                 attempts=1))
    return outs


def _scripted(mp, scorers):
    """The trainer's RARE phase with the scripted judge (each SharedScorer appended to `scorers`) and writer."""
    from rubric_jax.methods import rare as rare_phase

    def make_scorer(judge, retry, mode):
        scorers.append(SharedScorer(judge))
        return scorers[-1]

    mp.setattr(rare_phase, "RubricScorer", make_scorer)
    mp.setattr(rare_phase, "make_writer", lambda rc, model, tok, seed: revising_writer)


def _revision_run_config(ckpt, every):
    from test_trainer import _tiny_run_config

    return _tiny_run_config("rare_task", ckpt, steps=4, **{"checkpoint.every": every})


@pytest.fixture(scope="module")
def straight_revision_run(tiny_qwen3, tmp_path_factory):
    """The uninterrupted run that both kill-and-resume cases must end exactly like, run once for the module
    (saving every step; how often a run saves does not change what it trains, so the case that saves every 2
    steps must still match it). Returns (workdir, the checks per group its scripted scorer saw)."""
    from rubric_jax.rl import trainer

    scorers, straight = [], str(tmp_path_factory.mktemp("straight_revision_run"))
    with pytest.MonkeyPatch.context() as mp:
        _scripted(mp, scorers)
        trainer.train(_revision_run_config(tiny_qwen3[0], 1), straight)
    return straight, scorers[-1].seen


@pytest.mark.slow
@pytest.mark.parametrize("crash_step", [2, 3])
def test_trainer_revises_the_shared_rubric_and_survives_a_kill(crash_step, straight_revision_run, tiny_qwen3, tmp_path,
                                                               monkeypatch):
    """rare_task:tiny's schedule (4 steps, 4 queries a step, one revision after step 2) with a scripted judge
    and writer: the revision sees 12 queries, applies from step 3, and a run killed in step 2 (evidence of
    steps 0-1 from the checkpoint) or step 3 (the state after the revision, saved by the crash) ends exactly
    like an uninterrupted one (the module's straight_revision_run)."""
    from rubric_jax.rl import trainer
    from rubric_jax.rl.checkpoint import Checkpointer
    from rubric_jax.rl.metrics import read_metrics
    from test_trainer import kill_then_resume

    _scripted(monkeypatch, [])
    cfg = lambda: _revision_run_config(tiny_qwen3[0], 2 if crash_step == 3 else 1)  # noqa: E731
    (straight, seen), resumed = straight_revision_run, str(tmp_path / "b")
    ma = read_metrics(straight)
    assert [m.get("rare/revision_accepted") for m in ma] == [None, None, 1.0, None]
    # steps 0-2 train on the shared rubric as given, step 3 on the revision
    per_step = [s for s in seen if len(s) == 6]
    assert all(not c.startswith("revised") for s in per_step[:12] for c in s)
    assert all(c.startswith("revised") and c.endswith("at 12") for s in per_step[-4:] for c in s)
    texts = [json.loads(x) for x in open(os.path.join(straight, "texts.jsonl"))]
    recs = [json.loads(v) for t in texts for k, v in t.items() if k.startswith("rare/revision_")]
    assert [r["status"] for r in recs] == ["accepted"] and len(recs[0]["queries"]) == 12

    kill_then_resume(monkeypatch, lambda: trainer.train(cfg(), resumed), crash_step)
    mb = read_metrics(resumed)
    for x, y in zip(ma, mb):
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], abs=1e-6), (x["step"], k)
    _, meta = Checkpointer(resumed).restore()
    (task,) = meta["rubrics"]["revised"]
    assert task == "task:script_live_action" and meta["rubrics"]["revised"][task]["rubric"]["version"] == 2
    assert {g["step"] for g in meta["evidence"]["groups"]} == {2, 3}  # what a revision at step 4 would see
