"""Automatic curriculum pacing: the pure rule (rubric_jax.rewards.pacing) and the held-out evaluation
(rubric_jax.methods.rcrl.pacing_phase), on scripted readings, stand-in models and a tiny random Qwen3."""

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubric_jax.data import load_jsonl
from rubric_jax.rewards import curriculum_weights, permute_order
from rubric_jax.rewards import pacing as P
from rubric_jax.methods.rcrl import pacing_phase as PP
from rubric_jax.rubrics import Criterion, load_rubric

CFG = P.PacingConfig(every=10, window=3, epsilon=0.02, min_interval=45, max_interval=200)


def scripted(pos, step):
    """Held-out readings by curriculum position: 0 rises to 0.70 by step 40 and stays; 1 is flat at 0.5 from its
    arrival at 70; 2 gains 0.03 per reading from its arrival at 115 (never a plateau); 3, the last, is never read."""
    if pos == 0:
        return min(0.5 + 0.05 * (step // 10), 0.70)
    if pos == 1:
        return 0.5
    if pos == 2:
        return 0.3 + 0.03 * ((step - 115) // 10)
    raise AssertionError(f"position {pos} read at step {step}")


# ---------------------------------------------------------------------------------------------------------------
# the rule


def test_scripted_history_arrivals_hand_computed():
    # 0: readings 0.50 .. 0.70 at steps 0..40, then 0.70; at 70 the last three (50, 60, 70) do not beat the best
    #    of 0..40 (0.70): D = 0 -> plateau, 70 >= 45 -> arrives at 70.
    # 1: flat; plateau from its 4th reading (step 100, offset 30) but min_interval 45 holds it until 115, a step
    #    off the reading grid, decided on the readings of 70..110.
    # 2: D = 0.09 at every reading: forced at 115 + 200 = 315 (no reading there: the arrival is forced anyway).
    state = P.schedule(scripted, CFG, num_criteria=4, steps=400)
    assert state.arrivals == (0, 70, 115, 315)
    assert state.reasons == ("start", "plateau", "plateau", "max_interval")
    steps_by_pos = {p: [s for s, q, _ in state.evaluations if q == p] for p in range(4)}
    assert steps_by_pos[0] == list(range(0, 71, 10))
    assert steps_by_pos[1] == [70, 80, 90, 100, 110]
    assert steps_by_pos[2] == list(range(115, 306, 10))
    assert steps_by_pos[3] == []  # nothing is decided after the last criterion: no reading of it
    w_last = dict((s, w) for s, q, w in state.evaluations if q == 2)[305]
    assert w_last == pytest.approx(0.3 + 0.03 * 19)


def test_decide_reasons_along_the_schedule():
    state, seen = P.PacingState(), {}
    for step in range(0, 120):
        if P.reading_due(state, step, CFG, 4):
            state = P.record(state, step, scripted(state.num_active - 1, step))
        state, arrived, reason = P.decide(state, step, CFG, 4)
        seen[step] = reason
        if arrived:
            state = P.record(state, step, scripted(state.num_active - 1, step))
    assert [seen[s] for s in (0, 20, 30, 60, 70)] == ["warmup", "warmup", "improving", "improving", "plateau"]
    assert [seen[s] for s in (100, 114, 115, 116)] == ["min_interval", "min_interval", "plateau", "warmup"]


@settings(max_examples=40, deadline=None)
@given(every=st.integers(1, 15), window=st.integers(1, 4), min_interval=st.integers(1, 60),
       slack=st.integers(1, 80), criteria=st.integers(2, 6), seed=st.integers(0, 10_000),
       drift=st.sampled_from([0.0, 0.01, 0.05]))
def test_arrival_gaps_stay_within_min_and_max(every, window, min_interval, slack, criteria, seed, drift):
    max_interval = max(min_interval, every * window) + slack
    cfg = P.PacingConfig(every=every, window=window, epsilon=0.02, min_interval=min_interval,
                         max_interval=max_interval)
    noise = np.random.default_rng(seed).uniform(-0.05, 0.05, size=(criteria, 2000))

    def readings(pos, step):
        return float(np.clip(0.5 + drift * step / 10 % 0.5 + noise[pos, step], 0, 1))

    state = P.schedule(readings, cfg, criteria, steps=criteria * max_interval + 1)
    assert state.num_active == criteria  # every criterion arrives by max_interval after the one before
    for (a, b), reason in zip(zip(state.arrivals, state.arrivals[1:]), state.reasons[1:]):
        assert cfg.earliest_plateau <= b - a <= max_interval
        assert (reason == "max_interval") == (b - a == max_interval)


def test_max_interval_off_the_reading_grid():
    cfg = P.PacingConfig(every=30, window=3, epsilon=0.02, min_interval=10, max_interval=100)
    state = P.schedule(lambda pos, step: 0.1 + 0.002 * step, cfg, num_criteria=3, steps=300)
    assert state.arrivals == (0, 100, 200)  # readings at 0, 30, 60, 90 keep improving; forced at exactly 100
    assert state.reasons == ("start", "max_interval", "max_interval")


def test_epsilon_boundary():
    h = lambda *ws: [(10 * i, w) for i, w in enumerate(ws)]
    assert P.plateaued(h(0.5, 0.5, 0.52, 0.51), window=3, epsilon=0.02)  # D = 0.02 exactly: no progress
    assert not P.plateaued(h(0.5, 0.5, 0.5201, 0.51), window=3, epsilon=0.02)
    assert not P.plateaued(h(0.5, 0.5, 0.5), window=3, epsilon=0.02)  # needs W + 1 readings
    assert P.plateaued(h(0.7, 0.6, 0.6, 0.7), window=3, epsilon=0.0)
    assert not P.plateaued(h(0.7, 0.6, 0.6, 0.7000001), window=3, epsilon=0.0)
    assert P.improvement(h(0.5, 0.8, 0.6, 0.55, 0.4), window=3) == pytest.approx(0.6 - 0.8)
    cfg = P.PacingConfig(every=10, window=3, epsilon=0.02, min_interval=30, max_interval=200)
    at = P.PacingState(arrivals=(0,), reasons=("start",), history=tuple(h(0.5, 0.5, 0.52, 0.51)))
    assert P.decide(at, 30, cfg, 2)[1:] == (True, "plateau")
    above = dataclasses.replace(at, history=tuple(h(0.5, 0.5, 0.5201, 0.51)))
    assert P.decide(above, 30, cfg, 2)[1:] == (False, "improving")


def test_tiny_interval_config():
    cfg = P.PacingConfig.for_interval(1)
    assert (cfg.every, cfg.window, cfg.min_interval, cfg.max_interval) == (1, 1, 1, 2)
    flat = P.schedule(lambda pos, step: 0.5, cfg, num_criteria=4, steps=6)
    assert flat.arrivals == (0, 1, 2, 3)  # the fixed interval-1 schedule when nothing improves
    rising = P.schedule(lambda pos, step: 0.1 * step, cfg, num_criteria=4, steps=8)
    assert rising.arrivals == (0, 2, 4, 6)
    assert set(rising.reasons[1:]) == {"max_interval"}


def test_for_interval_scales_the_defaults():
    assert P.PacingConfig.for_interval(100) == P.PacingConfig()
    c = P.PacingConfig.for_interval(50)
    assert (c.every, c.window, c.min_interval, c.max_interval) == (5, 3, 25, 100)
    assert P.PacingConfig.for_interval(100, every=25, prompts=4).every == 25
    with pytest.raises(ValueError, match="reward.interval"):
        P.PacingConfig.for_interval(0)


@pytest.mark.parametrize("field,value", [
    ("every", 0), ("every", 2.5), ("window", 0), ("window", True), ("epsilon", -0.01), ("epsilon", 1.0),
    ("epsilon", math.nan), ("min_interval", 0), ("max_interval", 50), ("prompts", 0), ("seed", -1),
])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"pacing\.{field}"):
        P.PacingConfig(**{field: value})


def test_unreachable_plateau_is_an_error():
    with pytest.raises(ValueError, match=r"pacing\.window=3.*pacing\.every=30.*never arrive"):
        P.PacingConfig(every=30, window=3, min_interval=10, max_interval=90)
    P.PacingConfig(every=30, window=3, min_interval=10, max_interval=91)


def test_state_round_trip_resumes_the_same_schedule():
    whole = P.schedule(scripted, CFG, 4, steps=400)
    for cut in (1, 75, 112, 150):
        part = P.schedule(scripted, CFG, 4, steps=cut)
        restored = P.PacingState.from_dict(json.loads(json.dumps(part.to_dict())))
        assert restored == part
        assert P.schedule(scripted, CFG, 4, steps=400, state=restored, start=cut) == whole


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.pop("arrivals"), "arrivals"),
    (lambda d: d.update(arrivals=[0, 70, 70]), "arrivals"),
    (lambda d: d.update(arrivals=[5, 70]), "arrivals"),
    (lambda d: d.update(reasons=["start"]), "reasons"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(history=[[200, 1.5]]), "history"),
    (lambda d: d.update(history=[[10, 0.5]]), "history"),  # before the last arrival (115)
])
def test_from_dict_rejects_malformed_states(edit, field):
    d = P.schedule(scripted, CFG, 4, steps=150).to_dict()
    edit(d)
    with pytest.raises(ValueError, match=rf"pacing state\.{field}"):
        P.PacingState.from_dict(d)


@pytest.mark.parametrize("mode", ["emphasis", "equal"])
@pytest.mark.parametrize("c", [1, 3, 13])
def test_weights_from_state_equal_curriculum_weights(mode, c):
    order = permute_order(c, 3)
    for k in range(1, c + 1):
        state = P.PacingState(arrivals=tuple(range(0, 7 * k, 7)), reasons=("start",) + ("plateau",) * (k - 1))
        for alpha, o in ((0.5, None), (0.7, order)):
            want = np.asarray(curriculum_weights((k - 1) * 100 + 42, c, 100, alpha, mode, order=o))
            np.testing.assert_array_equal(P.weights_from_state(state, c, alpha, mode, order=o), want)
    with pytest.raises(ValueError, match="active criteria"):
        P.weights_for_active(c + 1, c)


def test_record_and_decide_reject_inconsistent_calls():
    s = P.record(P.PacingState(), 0, 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        P.record(s, 10, 1.2)
    with pytest.raises(ValueError, match="step 0"):
        P.record(s, 0, 0.5)  # two readings at one step
    s2 = P.PacingState(arrivals=(0, 40), reasons=("start", "plateau"))
    with pytest.raises(ValueError, match="before"):
        P.decide(s2, 39, CFG, 3)
    with pytest.raises(ValueError, match="rubric has 1"):
        P.decide(s2, 50, CFG, 1)
    assert P.decide(s2, 50, CFG, 2) == (s2, False, "complete")
    assert not P.reading_due(s2, 50, CFG, 2)


# ---------------------------------------------------------------------------------------------------------------
# held-out prompts and the evaluation phase


def test_split_records_is_deterministic_and_disjoint():
    recs = load_jsonl("creative_writing")
    cfg = P.PacingConfig(prompts=16)
    train, held = PP.split_records(recs, cfg, min_train=8)
    ids = [r.id for r in held.records]
    assert held.disjoint and len(ids) == 16 and len(train) == len(recs) - 16
    assert not set(ids) & {r.id for r in train}
    assert [r.id for r in train] == [r.id for r in recs if r.id not in set(ids)]  # training order kept
    _, again = PP.split_records(recs[::-1], cfg, min_train=8)
    assert [r.id for r in again.records] == ids  # by id, not by position in the file
    _, other = PP.split_records(recs, dataclasses.replace(cfg, seed=1), min_train=8)
    assert [r.id for r in other.records] != ids
    train_all, overlap = PP.split_records(recs, cfg, min_train=len(recs) - 15)
    assert not overlap.disjoint and len(train_all) == len(recs) and [r.id for r in overlap.records] == ids


class FakeJudge:
    """Stands in for Judge.pairwise_batch: the longer answer wins; records what it was asked."""

    def __init__(self):
        self.calls = []

    def pairwise_batch(self, prompts, responses, criteria, *, pairing, seed, group_ids):
        self.calls.append(([c.id for c in criteria], [list(g) for g in responses], pairing, list(group_ids)))
        out = []
        for a, b in responses:
            w = 0.5 if len(a) == len(b) else float(len(a) > len(b))
            out.append(dataclasses.make_dataclass("R", ["win_rates"])(np.array([[w], [1 - w]], np.float32)))
        return out


def _fake_runtime(cfg, criteria):
    recs = load_jsonl("creative_writing")
    _, held = PP.split_records(recs, cfg, min_train=1)
    calls = []

    def generate(model, prompt_ids):
        calls.append((model, len(prompt_ids)))
        return [("long answer " * 3 if model == "policy" else "short") + str(i) for i in range(len(prompt_ids))]

    tok = type("Tok", (), {"encode_chat": lambda self, p, system=None: [len(p), 1, 2]})()
    rt = PP.build(cfg, held, criteria, tok, max_new_tokens=8, generate=generate, fingerprint=lambda m: f"fp:{m}")
    return rt, calls


CRITS = [Criterion(id=f"c{i}", name=f"C{i}", check=f"Criterion {i}.") for i in range(3)]


def test_advance_reads_policy_against_cached_base():
    cfg = P.PacingConfig.for_interval(1, prompts=3)
    rt, calls = _fake_runtime(cfg, CRITS)
    judge = FakeJudge()
    kw = dict(policy_model="policy", base_model="base", judge=judge)
    w0, m0 = PP.advance(rt, 0, **kw)
    assert m0["pacing/heldout_win_rate"] == 1.0  # row 0 is the policy's (longer) answer
    assert m0["pacing/reason_warmup"] == 1.0 and m0["pacing/arrived"] == 0.0 and "time/pacing" in m0
    assert judge.calls[0][0] == ["c0"] and judge.calls[0][2] == "all" and judge.calls[0][3] == [0, 1, 2]
    assert [g[1] for g in judge.calls[0][1]] == ["short0", "short1", "short2"]
    np.testing.assert_array_equal(w0, [1.0, 0.0, 0.0])
    # step 1: a flat reading (1.0 again) is a plateau, criterion c1 arrives and its reference reading re-judges
    # the answers this step already generated
    w1, m1 = PP.advance(rt, 1, **kw)
    assert m1["pacing/arrived"] == 1.0 and m1["pacing/reason_plateau"] == 1.0
    assert m1["pacing/arrival_win_rate"] == 1.0 and m1["pacing/active_criteria"] == 2.0
    assert [c[0] for c in judge.calls[1:]] == [["c0"], ["c1"]]
    np.testing.assert_array_equal(w1, P.weights_for_active(2, 3))
    PP.advance(rt, 2, **kw)
    assert [m for m, _ in calls] == ["base", "policy", "policy", "policy"]  # base answered once
    assert rt.base_generations == 1 and rt.state.arrivals == (0, 1, 2)
    _, m3 = PP.advance(rt, 3, **kw)
    assert m3["pacing/reason_complete"] == 1.0 and len(calls) == 4  # all criteria active: no more readings


def test_decide_fixed_follows_the_fixed_curriculum():
    # interval 3, 4 criteria: arrivals at 0, 3, 6, 9 whatever the readings, weights equal curriculum_weights
    state = P.PacingState()
    seen = []
    for step in range(12):
        if step % 2 == 0 and state.num_active < 4:
            state = P.record(state, step, 0.9 if step % 4 else 0.1)  # readings do not move the schedule
        state, arrived, reason = P.decide_fixed(state, step, 3, 4)
        seen.append(reason)
        np.testing.assert_array_equal(P.weights_from_state(state, 4), np.asarray(curriculum_weights(step, 4, 3)))
    assert state.arrivals == (0, 3, 6, 9) and state.reasons == ("start", "schedule", "schedule", "schedule")
    assert seen[:4] == ["scheduled", "scheduled", "scheduled", "schedule"] and seen[-1] == "complete"
    assert P.PacingState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    with pytest.raises(ValueError, match="skipped"):
        P.decide_fixed(P.PacingState(), 6, 3, 4)  # two criteria due at once
    with pytest.raises(ValueError, match="interval"):
        P.decide_fixed(P.PacingState(), 0, 0, 4)


def test_monitor_mode_reads_but_keeps_the_fixed_schedule():
    cfg = P.PacingConfig.for_interval(2, prompts=3)  # every 1, min 1, max 4, window 3
    rt, calls = _fake_runtime(cfg, CRITS)
    rt.fixed_interval = 2
    judge = FakeJudge()
    kw = dict(policy_model="policy", base_model="base", judge=judge)
    got = [PP.advance(rt, t, **kw) for t in range(6)]
    # readings every step until all are active (flat at 1.0: a plateau the auto rule would act on at step 3),
    # arrivals at 0, 2, 4 only
    assert [m.get("pacing/heldout_win_rate") for _, m in got] == [1.0, 1.0, 1.0, 1.0, 1.0, None]
    assert "pacing/arrival_win_rate" in got[2][1] and "pacing/arrival_win_rate" not in got[4][1]  # the last: none
    assert [m["pacing/arrived"] for _, m in got] == [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert got[2][1]["pacing/reason_schedule"] == 1.0 and got[3][1]["pacing/reason_scheduled"] == 1.0
    assert rt.state.arrivals == (0, 2, 4)
    for t, (w, _) in enumerate(got):
        np.testing.assert_array_equal(w, np.asarray(curriculum_weights(t, 3, 2)))


def test_checkpoint_entry_restores_state_and_base_cache():
    cfg = P.PacingConfig.for_interval(1, prompts=2)
    rt, _ = _fake_runtime(cfg, CRITS)
    kw = dict(policy_model="policy", base_model="base", judge=FakeJudge())
    PP.advance(rt, 0, **kw)
    before = PP.snapshot(rt)
    PP.advance(rt, 1, **kw)
    entry = json.loads(json.dumps(PP.state_dict(rt, before)))  # the state from before the interrupted step
    fresh, calls = _fake_runtime(cfg, CRITS)
    PP.set_state(fresh, entry, "checkpoint 1")
    assert fresh.state == before
    PP.advance(fresh, 1, **kw)
    assert fresh.state == rt.state and fresh.base_generations == 0 and [m for m, _ in calls] == ["policy"]
    PP.advance(fresh, 2, **dict(kw, base_model="other base"))  # other weights: the cache no longer applies
    assert fresh.base_generations == 1
    with pytest.raises(ValueError, match="no pacing state"):
        PP.set_state(fresh, None, "checkpoint 1")
    with pytest.raises(ValueError, match="held-out prompts"):
        PP.set_state(fresh, dict(entry, heldout=["x", "y"]), "checkpoint 1")


def test_blocks_cover_the_prompts_in_process_order():
    hosts = lambda i, n: type("H", (), {"index": i, "count": n})()
    for n, count in ((16, 1), (16, 3), (2, 4)):
        blocks = [PP._block(n, hosts(i, count)) for i in range(count)]
        assert blocks[0][0] == 0 and blocks[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))


@pytest.mark.slow
def test_pacing_phase_with_a_real_judge_and_generator(tiny_qwen3_model, qwen_tokenizer):
    """The phase with the real greedy generator and Judge, on the tiny random Qwen3: what is checked (an exact
    tie when the policy is the base, a reading that moves with the policy's answers, the base answered once)
    is the phase's bookkeeping, not a real model's preferences."""
    from rubric_jax.judge import Judge

    model, tok = tiny_qwen3_model, qwen_tokenizer

    cfg = P.PacingConfig.for_interval(1, prompts=2)
    _, held = PP.split_records(load_jsonl("creative_writing"), cfg, min_train=2)
    criteria = list(load_rubric("creative_writing").criteria[:2])
    base_calls = []
    greedy = PP.greedy_generator(tok, max_new_tokens=4)

    def generate(model, ids):
        base_calls.append(len(ids))
        return greedy(model, ids)

    rt = PP.build(cfg, held, criteria, tok, max_new_tokens=4, generate=generate)
    # soft verdicts, as the trainer's pacing judge reads them (rubric_jax.rl.setup)
    judge = Judge(model, tok, mode="logit", lane_tokens=32, max_response_tokens=16)
    kw = dict(policy_model=model, base_model=model, judge=judge)
    _, m0 = PP.advance(rt, 0, **kw)
    # The policy is the base: the same greedy answers, judged in both orders, tie exactly.
    assert 0.0 <= m0["pacing/heldout_win_rate"] <= 1.0
    assert m0["pacing/heldout_win_rate"] == pytest.approx(0.5, abs=1e-6)
    assert len(base_calls) == 2 and rt.base_generations == 1  # base once, policy once
    rates, _ = PP.measure(rt, [0, 1], policy_texts=["Rain taps the roof; the town sleeps.", "zzzz qqqq"], **kw)
    assert all(0.0 <= r <= 1.0 for r in rates) and rates != [0.5, 0.5]
    _, m1 = PP.advance(rt, 1, **kw)
    assert 0.0 <= m1["pacing/heldout_win_rate"] <= 1.0
    assert rt.base_generations == 1 and len(base_calls) == 3  # the second reading answered with the policy only


# ---------------------------------------------------------------------------------------------------------------
# in the trainer


@pytest.mark.slow
def test_auto_paced_training_resumes_with_its_pacing_state(tiny_qwen3, tmp_path, monkeypatch):
    """configs/rcrl_auto_pacing.py:tiny on a tiny random model: the weights follow the pacing state, held-out
    prompts leave the training set, and a run killed inside step 1 and restarted logs what an uninterrupted run
    logs, pacing readings included, without generating the base answers again."""
    from conftest import load_config
    from test_trainer import kill_then_resume

    from rubric_jax.rl import trainer
    from rubric_jax.rl.checkpoint import Checkpointer
    from rubric_jax.rl.metrics import read_metrics

    # 2 steps, saved after each: the resumed step 1 reads again and decides (a plateau needs the reading of
    # step 0, which only the checkpoint's pacing state holds)
    def cfg():
        c = load_config("rcrl_auto_pacing", "tiny")
        c.model, c.steps, c.max_completion_len, c.tensorboard = tiny_qwen3[0], 2, 8, False
        c.checkpoint.every = 1
        c.prompt_width = "max"  # the sampler and update programs of the suite's other tiny runs (test_trainer)
        return c

    generated = []
    real = PP.base_responses

    def spy(rt, base_model, hosts=None):
        before = rt.base_generations
        out = real(rt, base_model, hosts)
        generated.extend([1] * (rt.base_generations - before))
        return out

    monkeypatch.setattr(PP, "base_responses", spy)
    straight, resumed = str(tmp_path / "a"), str(tmp_path / "b")
    trainer.train(cfg(), straight)
    assert len(generated) == 1
    kill_then_resume(monkeypatch, lambda: trainer.train(cfg(), resumed), 1,
                     check=lambda: Checkpointer(resumed).latest_step() == 1)
    assert len(generated) == 2  # once per fresh run, not again on the resume
    ma, mb = read_metrics(straight), read_metrics(resumed)
    assert [m["step"] for m in mb] == [0, 1]
    for x, y in zip(ma, mb):
        assert x["active_criteria"] == x["pacing/active_criteria"]  # the weights follow the pacing state
        for k in x:
            if k.startswith("pacing/") or k == "active_criteria":
                assert x[k] == pytest.approx(y[k], abs=1e-6), (x["step"], k)
    assert any("pacing/heldout_win_rate" in m for m in ma)
    _, meta = Checkpointer(resumed).restore()
    heldout = set(meta["pacing"]["heldout"])
    assert len(heldout) == 2 and meta["pacing"]["base_cache"]["responses"]
    _, meta_a = Checkpointer(straight).restore()
    assert meta_a["pacing"]["state"] == meta["pacing"]["state"]


def _pacing_compare():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "pacing_compare.py")
    spec = importlib.util.spec_from_file_location("pacing_compare", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pacing_compare_summarizes_hand_made_rows(tmp_path):
    pc = _pacing_compare()
    rows = [
        {"step": 0, "pacing/active_criteria": 1.0, "pacing/arrived": 0.0, "pacing/reason_warmup": 1.0,
         "pacing/heldout_win_rate": 0.5, "time/pacing": 3.0, "time/step": 10.0, "judge/spread_logit": 0.01,
         "judge/spread_sign": 0.5, "judge/spread_hard": 0.0},
        {"step": 1, "pacing/active_criteria": 2.0, "pacing/arrived": 1.0, "pacing/reason_plateau": 1.0,
         "pacing/heldout_win_rate": 0.6, "pacing/arrival_win_rate": 0.55, "time/pacing": 1.0, "time/step": 10.0,
         "judge/spread_logit": 0.03, "judge/spread_sign": 0.25, "judge/spread_hard": 0.0},
        {"step": 2, "pacing/active_criteria": 2.0, "pacing/arrived": 0.0, "pacing/reason_warmup": 1.0,
         "time/step": 20.0},
    ]
    s = pc.summarize(rows)
    assert s["arrivals"] == [{"step": 1, "reason": "plateau", "criteria": 2, "arrival_win_rate": 0.55}]
    assert s["readings"] == [(0, 0.5), (1, 0.6)] and s["reading_mean"] == pytest.approx(0.55)
    assert s["reading_last"] == 0.6 and s["criteria"] == 2 and s["steps"] == 3
    assert s["time_pacing_s"] == 4.0 and s["pacing_share"] == pytest.approx(0.1)
    assert s["spread_mean"] == pytest.approx({"logit": 0.02, "sign": 0.375, "hard": 0.0})
    # a resumed run's rewritten steps: the last row of each step counts; a bad line is named
    w = tmp_path / "w"
    w.mkdir()
    (w / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows + [dict(rows[1], **{"time/step": 5.0})]))
    assert [r["time/step"] for r in pc.read_metrics(str(w))] == [10.0, 5.0, 20.0]
    (w / "metrics.jsonl").write_text('{"step": 0}\n{oops\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        pc.read_metrics(str(w))
    assert "| auto |" in pc.table({"runs": {"auto": dict(s, wall_s=None)}})
