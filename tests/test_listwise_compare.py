"""benchmarks/listwise_compare.py: the known-ranking groups and the figures computed from their scores."""

import importlib.util
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def lc():
    spec = importlib.util.spec_from_file_location("listwise_compare", os.path.join(ROOT, "benchmarks",
                                                                                   "listwise_compare.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_groups_hold_the_coherent_answer_and_its_degraded_copies(lc):
    from evals.judge_pairs import load_answers

    answers = load_answers()[:3]
    groups = lc.build_groups(3, seed=0)
    assert len(groups) == 3
    for a, (prompt, responses, best) in zip(answers, groups):
        assert prompt == a.prompt and responses[best] == a.answer
        assert len(responses) == 1 + len(lc.DEGRADED) and len(set(responses)) == len(responses)
    assert lc.build_groups(3, seed=0) == groups and lc.build_groups(3, seed=1) != groups


def test_group_figures_and_summary_by_hand(lc):
    f = lc.group_figures(np.array([0.2, 0.7, 0.7, 0.4]), best=1)  # ties the third answer: not right
    assert f == {"right": 2, "pairs": 3, "best_score": 0.7, "rank1": 0.0, "spread": pytest.approx(np.std([.2, .7, .7, .4]))}
    g = lc.group_figures(np.array([0.9, 0.1, 0.5]), best=0)
    assert g["right"] == 2 and g["rank1"] == 1.0
    s = lc.summarise([f, g], [1.0, 3.0], 12.0)
    assert s["accuracy"] == pytest.approx(4 / 5) and s["rank1"] == 0.5 and s["seconds_per_group"] == 2.0
    assert s["best_score"] == pytest.approx(0.8) and s["groups"] == 2 and s["sequences_per_group"] == 12.0
    assert "| all | 2 | 0.800 |" in lc.table({"all": s})
