"""The judged twins of configs/learn_ifeval.py (judged, pairwise, selfjudged) and the judge's live fidelity against
IFEval's programs: the agreement counts against hand-worked arrays, the reward bit-identical with the logging on
and off (the program never leaks into a judged reward), the configs equal to the program's in everything but the
reward's source, and each :tiny variant training on the tiny random model."""


import numpy as np
import pytest

from rubric_jax.data import load_jsonl
from rubric_jax.judge import Judge
from rubric_jax.methods import agreement
from rubric_jax.methods import rlmr as rlmr_phase
from rubric_jax.rewards import judge_health as H
from rubric_jax.rl import preflight, trainer
from rubric_jax.methods.rcrl.reward import RewardConfig, judge_rewards_per_prompt
from rubric_jax.verifiers.constraints import parse_constraints
from rubric_jax.verifiers.verifier import ConstraintVerifier, GroupVerdict

from conftest import load_config  # noqa: E402
from test_learn_ifeval import TRAIN  # noqa: E402
from test_trainer import _tiny_run_config  # noqa: E402

JUDGED = ("learn_ifeval_judged", "learn_ifeval_pairwise", "learn_ifeval_selfjudged", "learn_ifeval_judged_soft")


# ---------------------------------------------------------------------------------------------
# The agreement counts


def test_pointwise_agreement_counts_by_hand():
    judge = np.array([[1, 0], [1, 1], [0, 0]], bool)
    program = np.array([[1, 1], [0, 1], [0, 0]], bool)
    agree, n = H.pointwise_program_agreement(judge, program)
    np.testing.assert_array_equal(agree, [2, 2])  # column 0: rows 0 and 2 agree; column 1: rows 1 and 2
    np.testing.assert_array_equal(n, [3, 3])
    decided = np.array([[1, 1], [1, 0], [1, 1]], bool)  # row 1's second verdict was not compared
    agree, n = H.pointwise_program_agreement(judge, program, decided)
    np.testing.assert_array_equal(agree, [2, 1])
    np.testing.assert_array_equal(n, [3, 2])


def test_pairwise_agreement_counts_program_decided_pairs_once_and_ties_as_misses():
    # G = 4, K = 2. Criterion 0: rollouts 0 and 3 keep it, 1 and 2 break it -> decided pairs (0,1) (0,2) (1,3) (2,3)
    program = np.array([[1, 0], [0, 0], [0, 1], [1, 1]], bool)
    p = np.full((4, 4, 2), 0.5)

    def set_p(i, j, k, v):
        p[i, j, k], p[j, i, k] = v, 1 - v

    set_p(0, 1, 0, 0.9)  # keeper 0 wins: same way
    set_p(0, 2, 0, 0.5)  # tie: not the same way
    set_p(1, 3, 0, 0.2)  # keeper 3 wins (p(1 > 3) < 1/2): same way
    set_p(2, 3, 0, 0.7)  # breaker 2 wins: not
    set_p(0, 3, 0, 0.1)  # both keep: not program-decided, whatever the judge says
    # criterion 1: 2 and 3 keep it -> decided pairs (0,2) (0,3) (1,2) (1,3); the pair (1, 3) was not judged
    set_p(0, 2, 1, 0.3)
    set_p(0, 3, 1, 0.6)
    set_p(1, 2, 1, 0.4)
    mask = ~np.eye(4, dtype=bool)
    mask[1, 3] = mask[3, 1] = False
    agree, n = H.pairwise_program_agreement(p, mask, program)
    np.testing.assert_array_equal(n, [3, 3])  # (1, 3) unjudged drops from both criteria
    np.testing.assert_array_equal(agree, [1, 2])  # c0: (0,1); c1: (0,2), (1,2)
    agree, n = H.pairwise_program_agreement(p, mask, program, decided_k=np.array([True, False]))
    np.testing.assert_array_equal(n, [3, 0])
    np.testing.assert_array_equal(agree, [1, 0])


def _verdict(kinds_args, llm):
    cons = parse_constraints([{"type": k, **a} for k, a in kinds_args])
    g, k = np.shape(llm)
    return GroupVerdict(cons, ("llm",) * k, np.asarray(llm) >= 0.5, np.full((g, k), np.nan), np.asarray(llm, np.float32))


def test_pointwise_rows_compare_the_verifier_with_the_program_and_pool_by_kind():
    lower, comma = ("change_case:english_lowercase", {}), ("punctuation:no_comma", {})
    v1 = _verdict([lower, comma], [[0.9, 0.8], [0.7, 0.2], [0.1, np.nan]])
    v2 = _verdict([comma], [[0.6], [0.4]])
    responses = [["all lower here", "Not lower, at all", "lower, but commas"], ["no comma", "a, b"]]
    rows = agreement.pointwise_rows([v1, v2], responses)
    lo, co = agreement.KINDS.index(lower[0]), agreement.KINDS.index(comma[0])
    # group 1: lowercase program T F T, judge T T F -> 1 of 3; comma program T F F, judge T F (nan) -> 2 of 2
    # group 2: comma program T F, judge T F -> 2 of 2
    np.testing.assert_array_equal(rows["decided"][:, [lo, co]], [[3, 2], [0, 2]])
    np.testing.assert_array_equal(rows["agree"][:, [lo, co]], [[1, 2], [0, 2]])
    m = agreement.metrics(rows)
    assert m["judge/program_agreement"] == pytest.approx(5 / 7)
    assert m[f"judge/program_agreement/{lower[0]}"] == pytest.approx(1 / 3)
    assert m[f"judge/program_agreement/{comma[0]}"] == pytest.approx(1.0)
    assert len([k for k in m if k.startswith("judge/program_agreement/")]) == 2
    assert agreement.metrics({k: np.zeros_like(v) for k, v in rows.items()}) == {}


# ---------------------------------------------------------------------------------------------
# The program never reaches the reward


RESPONSES = ["Wind moves over the clouds and the valley.", "the wind, the clouds.",
             '"A quiet answer with no bird in it."', "Nothing here."]


@pytest.fixture(scope="module")
def records():
    recs = load_jsonl(TRAIN)
    return [recs[0], recs[2]]  # keywords:existence; forbidden_words + quotation


@pytest.mark.slow  # the judge's programs compile on the tiny model: 4-6 s
def test_the_llm_verifiers_reward_is_bit_identical_with_the_agreement_log_on_and_off(records, tiny_qwen3_model,
                                                                                     qwen_tokenizer):
    judge = Judge(tiny_qwen3_model, qwen_tokenizer, max_response_tokens=32)
    cfg = rlmr_phase.RlmrConfig(writing="none", mix="linear", linear_a=0.0, linear_b=1.0, verifier="llm")
    cons = {r.id: parse_constraints(r.constraints) for r in records}
    out = {}
    for on in (True, False):
        rt = rlmr_phase.RlmrRuntime(cfg, ConstraintVerifier(judge, "llm"), cons, agreement=on)
        out[on] = rlmr_phase.rewards(rt, None, records, [r.prompt for r in records], [RESPONSES] * 2, 0.0, None,
                                     [0, 1])
    (r_on, rows_on, _), (r_off, rows_off, _) = out[True], out[False]
    assert r_on.tobytes() == r_off.tobytes()
    assert set(rows_on) - set(rows_off) == {"agreement"}
    for k in rows_off["rlmr"]:
        np.testing.assert_array_equal(rows_on["rlmr"][k], rows_off["rlmr"][k])
    # 4 rollouts x (1 + 2) instructions compared, each against the program
    assert rows_on["agreement"]["decided"].sum() == 12
    m = agreement.metrics(rows_on["agreement"])
    assert 0 <= m["judge/program_agreement"] <= 1 and "judge/program_agreement/startend:quotation" in m


@pytest.mark.slow  # the judge's programs compile on the tiny model: 4-6 s
def test_the_pairwise_reward_is_bit_identical_with_the_agreement_log_on_and_off(records, tiny_qwen3_model,
                                                                                qwen_tokenizer):
    judge = Judge(tiny_qwen3_model, qwen_tokenizer, max_response_tokens=32)
    rubrics = [r.load_rubric() for r in records]
    cfg = RewardConfig(method="pairwise", curriculum=False, weighting="equal")
    prompts = [r.prompt for r in records]
    seen = []

    def observe(results):
        seen.append(results)
        return agreement.pairwise_rows(results, [agreement.programmatic(r) for r in records], rubrics, [RESPONSES] * 2)

    r_on, rows_on = judge_rewards_per_prompt(judge, prompts, [RESPONSES] * 2, rubrics, cfg, seed=3, observe=observe)
    r_off, rows_off = judge_rewards_per_prompt(judge, prompts, [RESPONSES] * 2, rubrics, cfg, seed=3)
    assert r_on.tobytes() == r_off.tobytes()
    assert set(rows_on) - set(rows_off) == {"observed"}
    # the program decides: record 0 (wind + clouds) kept by rollouts 0 and 1 only -> 4 pairs; record 2's quotation
    # kept by rollout 2 only -> 3 pairs, its forbidden word ('dog' etc.) absent from all -> none
    decided = rows_on["observed"]["decided"].sum(axis=0)
    assert decided.sum() == 7, {agreement.KINDS[i]: int(x) for i, x in enumerate(decided) if x}
    # what the judge said, read back by hand from its own results
    p = seen[0][0].p[:, :, 0]
    want = sum(p[i, j] > 0.5 for i in (0, 1) for j in (2, 3))
    assert rows_on["observed"]["agree"][0].sum() == want


# ---------------------------------------------------------------------------------------------
# The configs


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


@pytest.mark.parametrize("name", JUDGED)
def test_each_judged_config_differs_from_the_programs_only_in_the_rewards_source(name):
    source = {"learn_ifeval_judged": {"rlmr.verifier", "judge.model"},
              "learn_ifeval_judged_soft": {"rlmr.verifier", "judge.model", "rlmr.credit"},
              "learn_ifeval_selfjudged": {"rlmr.verifier"},
              # not an RLMR run: the method and its rubric, and RLMR's section back at its defaults
              "learn_ifeval_pairwise": {"reward.method", "rubric", "rubric_source", "judge.model", "judge.questions",
                                        "judge.pairing",
                                        "rlmr.writing", "rlmr.mix", "rlmr.linear_a", "rlmr.verifier", "rlmr.credit"}}[name]
    for variant in (None, "tiny"):
        program, judged = _flat(load_config("learn_ifeval", variant).to_dict()), _flat(load_config(name, variant).to_dict())
        assert program.keys() == judged.keys()
        differ = {k for k in program if program[k] != judged[k]}
        assert differ <= source, (variant, sorted(differ - source))
        if variant is None:
            assert {"rlmr.verifier", "reward.method"} & differ  # the reward's source did change
    tiny = load_config(name, "tiny")
    preflight.check(tiny)
    assert tiny.judge.model == ""  # the smoke run needs no optional install
    full = load_config(name)
    assert full.judge.model == ("" if name.endswith("selfjudged") else "qwen2.5-coder-1.5b-instruct")
    if name.endswith("pairwise"):
        assert (full.reward.method, full.rubric_source, full.judge.questions) == ("pairwise", "record", "worse")
        assert full.judge.pairing == "circular"  # the hour's budget: the config says why
    else:
        assert (full.reward.method, full.rlmr.verifier, full.rlmr.writing) == ("rlmr", "llm", "none")
        assert full.rlmr.credit == ("soft" if name.endswith("soft") else "share")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["learn_ifeval_judged", "learn_ifeval_pairwise"])
def test_tiny_variant_trains_and_logs_the_judges_agreement_with_the_program(name, tiny_qwen3, tmp_path, monkeypatch):
    """Each judged :tiny on the tiny random Qwen3 for one step (about 35 s each on 2 shared cores, most of it
    compiling the judge's programs; learn_ifeval_selfjudged:tiny is learn_ifeval_judged:tiny exactly, as the config
    test above shows): the judge's verdicts are the reward, and the run asks the programs for their agreement,
    logged whenever a program decided anything (pairwise: a random model's two rollouts rarely split on an
    instruction, so there the metric is checked against the counts the run computed)."""
    counted = []
    for fn in ("pointwise_rows", "pairwise_rows"):
        real = getattr(agreement, fn)

        def spy(*a, _real=real, **k):
            rows = _real(*a, **k)
            counted.append(int(rows["decided"].sum()))
            return rows

        monkeypatch.setattr(agreement, fn, spy)
    cfg = _tiny_run_config(name, tiny_qwen3[0], steps=1)
    (m,) = trainer.train(cfg, str(tmp_path))
    assert counted, "the run never compared the judge with the programs"
    assert np.isfinite(m["reward/mean"])
    if name.endswith("judged"):
        assert counted[0] > 0  # every (rollout, instruction) verdict is compared
    if sum(counted):
        assert 0 <= m["judge/program_agreement"] <= 1
        assert any(k.startswith("judge/program_agreement/") for k in m)
    else:
        assert not any(k.startswith("judge/program_agreement") for k in m)
    assert load_config("learn_ifeval_selfjudged", "tiny").to_dict() == load_config("learn_ifeval_judged", "tiny").to_dict()
