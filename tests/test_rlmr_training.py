"""RLMR in training: the penalty's guarantee on random groups, the reward phase with real programmatic checks,
dynamic sampling inside a real step (scripted rewards), docs/configs.md's RLMR command on the embedded SmolLM2 and
its baselines' configs on a tiny random Qwen3."""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rubric_jax import rewards as R
from rubric_jax.methods import rlmr as rlmr_phase
from rubric_jax.rl import trainer
from rubric_jax.rl.dynamic import DynamicConfig
from rubric_jax.rl.metrics import PhaseTimer, read_metrics
from rubric_jax.rl.policy import Policy
from rubric_jax.verifiers.constraints import parse_constraints
from rubric_jax.verifiers.verifier import ConstraintVerifier

from conftest import load_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))




@st.composite
def groups(draw):
    n = draw(st.integers(2, 8))
    r = np.asarray(draw(st.lists(st.floats(0, 1, width=32, allow_subnormal=False), min_size=n, max_size=n)), np.float32)
    k = draw(st.integers(1, n - 1))
    v = np.zeros(n, bool)
    v[draw(st.permutations(range(n)))[:k]] = True
    return r, v, draw(st.floats(0.01, 0.5))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(groups())
def test_every_violator_gets_a_negative_advantage(group):
    """0 < k < n: after the penalty each violator's advantage is < 0 under grpo, dr_grpo and rloo, and the
    compliant rollouts keep their rewards."""
    r, v, gamma = group
    r_new, all_v = R.rlmr_penalty(jnp.asarray(r), jnp.asarray(v), gamma)
    assert not bool(all_v)
    np.testing.assert_array_equal(np.asarray(r_new)[~v], r[~v])
    for kind in ("grpo", "dr_grpo", "rloo"):
        adv = np.asarray(R.advantages(jnp.asarray(r_new)[None], kind=kind))[0]
        assert np.all(adv[v] < 0), (kind, r, v, gamma, adv)


class _Rec:
    def __init__(self, rid, constraints):
        self.id, self.constraints = rid, constraints


def _runtime(mix="penalty", **kw):
    cfg = rlmr_phase.RlmrConfig(mix=mix, **kw)
    recs = [_Rec("a", [{"type": "no_commas"}]), _Rec("b", [{"type": "no_commas"}]), _Rec("c", [])]
    cons = {r.id: parse_constraints(r.constraints) for r in recs}
    return rlmr_phase.RlmrRuntime(cfg, ConstraintVerifier(None, "auto"), cons), recs


RESPONSES = [["no comma here", "a, b", "fine text"],  # one violator
             ["x, y", "p, q", "m, n"],  # all violate: dropped
             ["u, v", "w", "z"]]  # no constraints: nobody violates
WRITING = np.asarray([[0.2, 0.9, 0.5], [0.1, 0.4, 0.7], [0.3, 0.6, 0.9]], np.float32)


def test_reward_phase_with_real_programs():
    rt, recs = _runtime(gamma=0.1)
    writing = lambda p, r: (WRITING, {"per_c": np.zeros((3, 3, 1)), "health": [{}] * 3})
    r, rows, drop = rlmr_phase.rewards(rt, writing, recs, ["p"] * 3, RESPONSES, 0.0, jax.random.key(0), [0, 1, 2])
    # group 0: n = 3, k = 1, r_vio_max = 0.9, sum = 1.6: delta = (2.7 + 0.3 - 1.6) / 2 = 0.7
    np.testing.assert_allclose(r[0], [0.2, 0.2, 0.5], atol=1e-6)
    np.testing.assert_allclose(r[1:], WRITING[1:])
    np.testing.assert_array_equal(drop, [False, True, False])
    m = rlmr_phase.rlmr_metrics(rows["rlmr"], rt.cfg)
    assert m["rlmr/violators_per_group"] == pytest.approx(4 / 3) and m["rlmr/all_violate_groups"] == pytest.approx(1 / 3)
    assert m["rlmr/delta_mean"] == pytest.approx(0.7) and m["verifier_pass/no_commas"] == pytest.approx(2 / 6)
    assert m["rlmr/constrained_groups"] == pytest.approx(2 / 3) and "rlmr/flipped_frac" not in m
    # flip probability 1 inverts every flag: the unconstrained group now has three "violators" (dropped)
    r, rows, drop = rlmr_phase.rewards(rt, writing, recs, ["p"] * 3, RESPONSES, 1.0, jax.random.key(0), [0, 1, 2])
    np.testing.assert_array_equal(rows["rlmr"]["violate"], ~rows["rlmr"]["violate_verifier"])
    np.testing.assert_array_equal(drop, [False, False, True])
    assert rlmr_phase.rlmr_metrics(rows["rlmr"], rt.cfg)["rlmr/flipped_frac"] == 1.0


def test_linear_mix_and_its_baselines():
    for (a, b) in ((1.0, 1.0), (1.0, 0.0), (0.0, 1.0)):
        rt, recs = _runtime("linear", linear_a=a, linear_b=b)
        writing = lambda p, r: (WRITING, {"per_c": np.zeros((3, 3, 1)), "health": [{}] * 3})
        r, rows, drop = rlmr_phase.rewards(rt, writing, recs, ["p"] * 3, RESPONSES, 0.0, jax.random.key(0), [0, 1, 2])
        passes = 1.0 - rows["rlmr"]["violate"]
        np.testing.assert_allclose(r, a * WRITING + b * passes, atol=1e-6)
        assert not drop.any()


def test_share_credit_counts_the_constraints_kept():
    """rlmr.credit="share": the verifier's term is the share of the prompt's constraints a rollout keeps (1 with
    none), checked by hand against two-constraint prompts; the all-or-nothing term on the same rollouts."""
    recs = [_Rec("a", [{"type": "no_commas"}, {"type": "must_include", "words": ["salt"]}]), _Rec("c", [])]
    cons = {r.id: parse_constraints(r.constraints) for r in recs}
    responses = [["salt, pepper", "salt only", "pepper, thyme", "plain"], ["a, b", "c", "d", "e"]]
    writing = lambda p, r: (np.zeros((2, 4), np.float32), {})
    got = {}
    for credit in ("share", "all"):
        cfg = rlmr_phase.RlmrConfig(mix="linear", linear_a=0.0, linear_b=1.0, writing="none", credit=credit)
        rt = rlmr_phase.RlmrRuntime(cfg, ConstraintVerifier(None, "auto"), cons)
        got[credit] = rlmr_phase.rewards(rt, writing, recs, ["p"] * 2, responses, 0.0, jax.random.key(0), [0, 1])[0]
    # kept: "salt, pepper" 1 of 2 (comma), "salt only" 2, "pepper, thyme" 0, "plain" 1 (no comma, no salt)
    np.testing.assert_allclose(got["share"], [[0.5, 1.0, 0.0, 0.5], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(got["all"], [[0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(rlmr_phase.kept_share(np.zeros((3, 0), bool)), [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="credit='share' needs rlmr.mix='linear'"):
        rlmr_phase.RlmrConfig(mix="penalty", credit="share")
    with pytest.raises(ValueError, match="rlmr.credit must be one of"):
        rlmr_phase.RlmrConfig(mix="linear", credit="some")


class _TableJudge:
    """Returns fixed pass probabilities per prompt: the soft credit's arithmetic is checked by hand here; the
    real verifier's p_pass is tested against the engine in test_verify.py."""

    def __init__(self, table):
        self.table = table

    def verify_batch(self, prompts, responses, texts, mode=None):
        return [dataclasses.replace(_P(), p_pass=np.asarray(self.table[p], np.float32)) for p in prompts]


@dataclasses.dataclass
class _P:
    p_pass: np.ndarray = None


def test_soft_credit_is_the_mean_pass_probability():
    """rlmr.credit="soft": mean_k P(keeps k): the LLM's p_pass where it verifies, the program's 0/1 where that
    runs, their product under verify="both"; 1 with no constraints. Hand-computed on two prompts."""
    recs = [_Rec("a", [{"type": "no_commas", "verify": "llm"}, {"type": "no_commas", "verify": "both"},
                       {"type": "must_include", "words": ["salt"], "verify": "program"}]), _Rec("c", [])]
    cons = {r.id: parse_constraints(r.constraints) for r in recs}
    responses = [["salt, pepper", "salt only"], ["x", "y"]]
    # judge sees the llm and both constraints of prompt "pa": (G = 2, K_llm = 2)
    judge = _TableJudge({"pa": [[0.9, 0.8], [0.3, 0.6]]})
    cfg = rlmr_phase.RlmrConfig(mix="linear", linear_a=0.0, linear_b=1.0, writing="none", credit="soft")
    rt = rlmr_phase.RlmrRuntime(cfg, ConstraintVerifier(judge, "auto"), cons)
    writing = lambda p, r: (np.zeros((2, 2), np.float32), {})
    r = rlmr_phase.rewards(rt, writing, recs, ["pa", "pc"], responses, 0.0, jax.random.key(0), [0, 1])[0]
    # "salt, pepper": llm 0.9, both 0 (comma) * 0.8, program 1 (salt) -> (0.9 + 0 + 1) / 3
    # "salt only":    llm 0.3, both 1 * 0.6,      program 1        -> (0.3 + 0.6 + 1) / 3
    np.testing.assert_allclose(r, [[1.9 / 3, 1.9 / 3], [1.0, 1.0]], atol=1e-6)
    judge.table["pa"] = [[0.9, 0.8], [0.2, 0.6]]
    r = rlmr_phase.rewards(rt, writing, recs, ["pa", "pc"], responses, 0.0, jax.random.key(0), [0, 1])[0]
    np.testing.assert_allclose(r[0], [1.9 / 3, 1.8 / 3], atol=1e-6)
    with pytest.raises(ValueError, match="credit='soft' needs rlmr.mix='linear'"):
        rlmr_phase.RlmrConfig(mix="penalty", credit="soft")


# ---- dynamic sampling in a real step ------------------------------------------------------------


@pytest.fixture(scope="module")
def setup(tiny_qwen3, tmp_path_factory):
    data = tmp_path_factory.mktemp("rlmr") / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Write line {i} without commas.",
                                        "constraints": [{"type": "no_commas"}]}) + "\n" for i in range(8)))
    c = load_config("writing_only", "tiny")
    c.unlock()
    c.model, c.data.path, c.max_completion_len, c.tensorboard = tiny_qwen3[0], str(data), 8, False
    c.data.seed = 0
    return trainer.build(c)


def _scripted(setup, odd_only=True):
    """The RLMR method's writing reward by group id: odd ids [0.2, 0.8] (spread), even ids [0.5, 0.5] (none); all
    zero if not odd_only."""
    def writing_reward(batch, prompts, responses):
        n = len(batch.records)
        r = np.asarray([[0.2, 0.8] if (gid % 2 and odd_only) else [0.5, 0.5] for gid in batch.group_ids], np.float32)
        return r, {"per_c": np.zeros((n, 2, len(setup.criteria)), np.float32), "health": [{}] * n}
    return writing_reward


@pytest.mark.slow
def test_dynamic_sampling_refills_bounds_and_pads(setup, monkeypatch):
    seen = []
    monkeypatch.setattr(Policy, "update", lambda self, batch, key: seen.append(batch) or {"loss": 0.0})
    monkeypatch.setattr(setup.method, "writing_reward", _scripted(setup))
    # refill: batch 0 has groups 0, 1 (only 1 kept); one extra batch brings group 3: full, nothing padded
    setup.dynamic = DynamicConfig(enabled=True, oversample=1, max_rounds=2)
    m = trainer.train_step(setup, 0, jax.random.key(1), PhaseTimer())
    assert m["dynamic/extra_rounds"] == 1 and m["dynamic/kept_frac"] == 0.5 and m["dynamic/padded_groups"] == 0
    (batch,) = seen
    np.testing.assert_allclose(batch.adv_b, [-1, 1, -1, 1], atol=1e-4)  # grpo of [0.2, 0.8] in both kept groups
    assert batch.completion_mask_bt.any(axis=1).all()
    # the bound: no extra round allowed -> the missing group is padded at zero weight
    seen.clear()
    setup.dynamic = DynamicConfig(enabled=True, oversample=1, max_rounds=0)
    m = trainer.train_step(setup, 1, jax.random.key(2), PhaseTimer())
    assert m["dynamic/padded_groups"] == 1 and m["dynamic/batch_fill"] == 0.5
    (batch,) = seen
    np.testing.assert_allclose(batch.adv_b, [-1, 1, 0, 0], atol=1e-4)
    assert batch.completion_mask_bt[:2].any(axis=1).all() and not batch.completion_mask_bt[2:].any()
    # nothing ever kept: the bound stops after max_rounds extra batches and the update is skipped entirely
    seen.clear()
    monkeypatch.setattr(setup.method, "writing_reward", _scripted(setup, odd_only=False))
    setup.dynamic = DynamicConfig(enabled=True, oversample=1, max_rounds=2)
    m = trainer.train_step(setup, 2, jax.random.key(3), PhaseTimer())
    assert seen == [] and m["dynamic/empty_update"] == 1.0
    assert m["dynamic/extra_rounds"] == 2 and m["dynamic/sampled_groups"] == 6 and m["dynamic/kept_frac"] == 0.0
    # agreement across processes: this process has its 2 groups after one extra batch, but another process
    # reports none kept, so every process keeps sampling to the bound (the same number of batches everywhere)
    monkeypatch.setattr(setup.method, "writing_reward", _scripted(setup))
    monkeypatch.setattr(setup.hosts, "gather", lambda obj: [obj, 0] if isinstance(obj, int) else [obj])
    setup.dynamic = DynamicConfig(enabled=True, oversample=1, max_rounds=2)
    m = trainer.train_step(setup, 3, jax.random.key(5), PhaseTimer())
    assert m["dynamic/extra_rounds"] == 2 and m["dynamic/padded_groups"] == 0
    monkeypatch.undo()
    monkeypatch.setattr(Policy, "update", lambda self, batch, key: {"loss": 0.0})
    # oversampling: two batches up front
    monkeypatch.setattr(setup.method, "writing_reward", _scripted(setup))
    setup.dynamic = DynamicConfig(enabled=True, oversample=2, max_rounds=0)
    m = trainer.train_step(setup, 4, jax.random.key(4), PhaseTimer())
    assert m["dynamic/sampled_groups"] == 4 and m["dynamic/extra_rounds"] == 0 and m["dynamic/padded_groups"] == 0


# ---- the configs in training: RLMR from docs/configs.md on the embedded model, its baselines on a tiny one ----


def test_the_logged_violator_advantage_is_the_largest_of_a_violator_in_a_kept_group():
    """rlmr/violator_adv_max, which the run of docs/configs.md's command below checks is < 0 whenever a kept
    group has a violator (a tiny random model's groups seldom mix violators and compliant rollouts: this is the
    hand-made case)."""
    adv = np.array([[0.5, -0.2, -0.3], [1.0, -1.0, 0.0], [0.3, -0.1, -0.2]])
    violate = np.array([[False, True, True], [True, False, False], [False, False, True]])
    weight = np.array([1.0, 0.0, 0.5])  # the second group was dropped (a padded slot): its violator is not counted
    assert rlmr_phase.violator_adv_max(adv, violate, weight) == pytest.approx(-0.2)
    assert rlmr_phase.violator_adv_max(adv, violate, np.array([0.0, 0.0, 1.0])) == pytest.approx(-0.2)
    assert rlmr_phase.violator_adv_max(adv, np.zeros_like(violate), weight) is None


@pytest.mark.slow
def test_rlmr_tiny_runs_from_the_readme_command(tiny_qwen3, tmp_path):
    """`python -m rubric_jax.main --config=configs/rlmr.py:tiny`, docs/configs.md's command, on the tiny random Qwen3
    (what is checked is the command, the mix and dynamic sampling, not what a real model writes; the README's
    first run is the SmolLM2 one, tests/conftest.py's trained_workdir): two steps with the real verifier
    (programs and the LLM), dynamic sampling logged, and every violator of a kept group below zero advantage."""
    wd = str(tmp_path / "rlmr")
    subprocess.run([sys.executable, "-m", "rubric_jax.main", "--config=configs/rlmr.py:tiny", f"--workdir={wd}",
                    f"--config.model={tiny_qwen3[0]}"], cwd=ROOT, check=True, timeout=1500)
    hist = read_metrics(wd)
    assert [m["step"] for m in hist] == [0, 1]
    for m in hist:
        assert 0.0 <= m["dynamic/kept_frac"] <= 1.0 and m["dynamic/sampled_groups"] >= 2
        assert any(k.startswith("verifier_pass/") for k in m)
        assert m.get("rlmr/violator_adv_max", -1.0) < 0.0
        assert 0.0 <= m["rlmr/violate_frac"] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["writing_only", "verifier_only", "rlmr_linear", "rlmr_noisy"])
def test_rlmr_baselines_run_two_steps(name, tiny_qwen3, tmp_path):
    """Each baseline's :tiny config for two steps, on the tiny random Qwen3 (what is checked is how the reward
    mixes the judge's writing score with the verifier's flags, not what a real model writes; the docs/configs.md
    command's test above runs RLMR itself). They compile into the session's cache (tests/conftest.py), so the
    programs of that command's subprocess, the same :tiny shapes on the same checkpoint, are loaded rather than
    compiled."""
    c = load_config(name, "tiny")
    c.unlock()
    c.model, c.tensorboard = tiny_qwen3[0], False
    hist = trainer.train(c, str(tmp_path))
    assert [m["step"] for m in hist] == [0, 1]
    for m in hist:  # reward/mean and the rlmr/ means are over the same sampled rollouts
        writing, passes = m["rlmr/writing_mean"], 1.0 - m["rlmr/violate_frac"]
        want = {"writing_only": writing, "verifier_only": passes, "rlmr_linear": writing + passes}.get(name)
        if want is not None:
            assert m["reward/mean"] == pytest.approx(want, abs=1e-5)
        else:
            assert c.reward.verifier_flip == 0.1 and 0.0 < m.get("rlmr/flipped_frac", 0.5) <= 1.0
    assert dataclasses.is_dataclass(rlmr_phase.RlmrConfig(**c.rlmr.to_dict()))
