"""evals.suites.fixed_rubric: normalisation to 0-100, macro averaging over task types, verdicts with ties,
the stratified bootstrap, the metric set, and one real tiny run on a tiny random checkpoint."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from evals.suites.fixed_rubric import (CATEGORIES, METRICS, criteria, load_requests, macro_mean, normalise,
                                       pair_outcomes, stratified_bootstrap, summarise_pairwise, verdict)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_twelve_metrics_four_categories_of_three():
    assert len(METRICS) == 12 and len({m[1] for m in METRICS}) == 12
    assert [m[0] for m in METRICS] == [c for c in CATEGORIES for _ in range(3)]
    cs = criteria()
    assert all(c.max_points == 2 and len(c.levels) == 3 for c in cs)


def test_normalise_by_hand():
    s = np.array([[2] * 12,
                  [2, 1, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2],
                  [0] * 12,
                  [2, 2, np.nan, 1, 1, 1, 0, 0, 0, 0, 0, 0]], float)
    n = normalise(s)
    assert n["overall"][:3] == pytest.approx([100.0, 50.0, 0.0])  # 24/24, 12/24, 0/24
    assert n["query_fulfillment"][:3] == pytest.approx([100.0, 50.0, 0.0])  # 6/6, 3/6, 0
    assert n["narrative_coherence"][1] == 0.0
    assert n["cinematic_executability"][1] == pytest.approx(50.0)
    assert n["dramatic_effectiveness"][1] == pytest.approx(100.0)
    # an unreadable metric voids its category and the overall (fixed denominators), nothing else
    assert np.isnan(n["query_fulfillment"][3]) and np.isnan(n["overall"][3])
    assert n["narrative_coherence"][3] == pytest.approx(50.0)
    with pytest.raises(ValueError):
        normalise(np.zeros((2, 11)))


def test_macro_mean_weights_types_equally():
    # pooled mean would be 0.75; the type means are 1 and 0
    assert macro_mean([1.0, 1.0, 1.0, 0.0], ["a", "a", "a", "b"]) == pytest.approx(0.5)
    assert macro_mean([1.0, np.nan, 0.0], ["a", "a", "b"]) == pytest.approx(0.5)


def test_verdicts_and_ties():
    assert verdict([0.9, 0.56, 0.54, 0.5, 0.46, 0.1], 0.05).tolist() == [1, 1, 0.5, 0.5, 0.5, 0]
    assert verdict([0.51, 0.49], 0.0).tolist() == [1, 0]
    p_ab = [0.9, 0.52, 0.9, 0.2]   # P(A better), A shown first
    p_ba = [0.1, 0.5, 0.9, 0.7]    # P(B better), B shown first
    out, agree = pair_outcomes(p_ab, p_ba, 0.05)
    # order verdicts for A: (1, 1), (tie, tie), (1, 0) position bias, (0, 0)
    assert out.tolist() == [1.0, 0.5, 0.5, 0.0]
    assert agree.tolist() == [True, True, False, True]


def test_stratified_bootstrap_resamples_within_types():
    # each type is constant, so every within-type resample gives the same macro mean; a pooled resample of
    # the five values would move it
    v, g = [1.0, 1.0, 0.0, 0.0, 0.0], ["a", "a", "b", "b", "b"]
    lo, hi = stratified_bootstrap(v, g, reps=300, seed=0)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    lo, hi = stratified_bootstrap([1.0, 0.0, 0.5, 1.0, 0.0, 1.0], ["a", "a", "a", "b", "b", "b"], reps=500)
    assert 0.0 <= lo < macro_mean([1.0, 0.0, 0.5, 1.0, 0.0, 1.0], list("aaabbb")) < hi <= 1.0
    assert stratified_bootstrap(v, g, reps=0) == (None, None)


def test_summarise_pairwise_by_hand():
    outcome = np.array([1.0, 1.0, 0.5, 0.0, 1.0, 1.0])
    agree = np.array([True, True, False, True, True, True])
    types = ["x", "x", "x", "y", "y", "y"]
    s = summarise_pairwise(outcome, agree, types, reps=400, seed=0)
    assert s["per_type"]["x"]["preference"] == pytest.approx(2.5 / 3)
    assert s["per_type"]["y"]["preference"] == pytest.approx(2 / 3)
    assert s["per_type"]["x"]["wins"] == 2 and s["per_type"]["y"]["losses"] == 1
    assert s["preference"] == pytest.approx((2.5 / 3 + 2 / 3) / 2)
    assert s["order_consistency"] == pytest.approx(5 / 6)
    assert s["lo"] <= s["preference"] <= s["hi"]


def test_load_requests_spreads_types():
    path = os.path.join(ROOT, "rubric_jax", "data", "scripts_test.jsonl")
    all_recs = load_requests(path, 0)
    assert len(all_recs) == 18 and len({r["task"] for r in all_recs}) == 3
    three = load_requests(path, 3)
    assert len({r["task"] for r in three}) == 3
    with pytest.raises(ValueError, match="only 18"):
        load_requests(path, 19)


@pytest.mark.slow
def test_fixed_rubric_real_tiny_run(tmp_path, tiny_qwen3):
    """2 requests, 16 new tokens, base against its shuffled copy, on a tiny random checkpoint (contestant and
    judge). No ordering is asserted (even the embedded 135M judge cannot order these: it gives every metric 2
    to both and prefers whichever script it sees first), only that the command runs end to end and its files
    agree with each other; that a judge which can read word order ranks the model above its shuffled copy is
    test_a_judge_that_reads_word_order_ranks_the_model_above_its_shuffled_copy.
    Can take over 30 s on a loaded CI machine: a subprocess (the command line is what is checked) that imports jax
    and compiles its sampler and judge programs, which no other test process shares."""
    ckpt = tiny_qwen3[0]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evals.run", "--suite=fixed_rubric",
           f"--models=base={ckpt},shuf=shuffled:{ckpt}",
           f"--judge={ckpt}", "--prompts=2", "--max_new_tokens=16", "--batch_size=2",
           "--bootstrap=50", f"--cache_dir={tmp_path / 'cache'}", f"--out={out}"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in ("results.json", "report.md", "fixed_rubric.png", "answers.jsonl"):
        assert (out / f).stat().st_size > 0, f
    res = json.loads((out / "results.json").read_text())
    assert set(res["models"]) == {"base", "shuf"}
    for m in res["models"].values():
        scores = np.array(m["scores"], float)
        assert scores.shape == (2, 12) and np.all((scores >= 0) & (scores <= 2))
        assert m["macro"]["overall"] == pytest.approx(macro_mean(normalise(scores)["overall"],
                                                                 [q["task"] for q in res["requests"]]))
        assert "repetition/ngram_3" in m["diagnostics"]
    pw = res["pairwise"]
    assert (pw["a"], pw["b"]) == ("base", "shuf") and pw["n"] == 2
    exp, _ = pair_outcomes(pw["p_ab"], pw["p_ba"], 0.05)
    assert pw["outcome"] == pytest.approx(exp.tolist())
    assert 0.0 <= pw["preference"] <= 1.0
    assert "Blind pairwise" in (out / "report.md").read_text()


def test_a_judge_that_reads_word_order_ranks_the_model_above_its_shuffled_copy(tmp_path, monkeypatch):
    """The whole suite with a judge double that can tell coherent text from its word-shuffled copy
    (tests/evals_coherence_double.py): higher fixed-rubric scores in every category, and the blind pairwise
    validation prefers the coherent model in both orders."""
    from evals.run import parse_args
    from evals.suites import fixed_rubric
    from evals_coherence_double import install

    install(monkeypatch)
    out = tmp_path / "out"
    res = fixed_rubric.run(parse_args(["--suite=fixed_rubric",
                                       "--models=base=smollm2-135m-instruct,shuf=shuffled:smollm2",
                                       "--judge=smollm2-135m-instruct", "--prompts=6", "--bootstrap=50",
                                       f"--out={out}", f"--cache_dir={tmp_path / 'cache'}", "--quiet"]))
    base, shuf = res["models"]["base"], res["models"]["shuf"]
    assert base["macro"]["overall"] > shuf["macro"]["overall"]
    for cat in CATEGORIES:
        assert base["macro"][cat] > shuf["macro"][cat], cat
    pw = res["pairwise"]
    assert (pw["a"], pw["b"]) == ("base", "shuf")
    assert pw["preference"] == 1.0 and pw["order_consistency"] == 1.0
    assert (out / "report.md").exists() and (out / "fixed_rubric.png").exists()
