"""evals suite rubric_score: the CWv3 prompt-file loader, seed insertion, negative-criterion inversion, margins and
the margin-weighted ratings, and one real end-to-end run on a tiny random checkpoint."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from evals.suites import rubric_score as rs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(tmp_path, obj, name="prompts.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(p)


GOOD = {
    "a1": {"title": "T1", "category": "c", "writing_prompt": "Write about <SEED> at night.",
           "seed_modifiers": ["a fox", "a train"]},
    "b2": {"title": "T2", "category": "c", "writing_prompt": "Write a poem.", "seed_modifiers": ["rain"]},
}


def test_loader_reads_good_entries_in_file_order(tmp_path):
    got = rs.load_cwv3_prompts(_write(tmp_path, GOOD))
    assert [p["id"] for p in got] == ["a1", "b2"]
    assert got[0]["seed_modifiers"] == ["a fox", "a train"] and got[1]["title"] == "T2"


@pytest.mark.parametrize("bad,msg", [
    ({"writing_prompt": "x", "title": "t", "category": "c"}, "seed_modifiers"),
    ({"writing_prompt": "x", "title": "t", "category": "c", "seed_modifiers": []}, "seed_modifiers"),
    ({"writing_prompt": "x", "title": "t", "category": "c", "seed_modifiers": ["ok", ""]}, "seed_modifiers"),
    ({"writing_prompt": "  ", "title": "t", "category": "c", "seed_modifiers": ["s"]}, "writing_prompt"),
    ({"writing_prompt": "x", "category": "c", "seed_modifiers": ["s"]}, "title"),
    ({"writing_prompt": "x", "title": "t", "category": 3, "seed_modifiers": ["s"]}, "category"),
    ("just a string", "expected an object"),
])
def test_loader_names_the_bad_prompt_id(tmp_path, bad, msg):
    path = _write(tmp_path, {**GOOD, "zz9": bad})
    with pytest.raises(ValueError) as e:
        rs.load_cwv3_prompts(path)
    assert "'zz9'" in str(e.value) and msg in str(e.value)
    assert "'a1'" not in str(e.value)


def test_loader_rejects_non_objects(tmp_path):
    for obj in ([GOOD["a1"]], {}, "{not json"):
        with pytest.raises(ValueError):
            rs.load_cwv3_prompts(_write(tmp_path, obj if isinstance(obj, str) else json.dumps(obj)))


def test_seed_insertion_and_iterations():
    assert rs.apply_seed("Write about <SEED> at night.", "a fox") == "Write about a fox at night."
    appended = rs.apply_seed("Write a poem.", "rain")
    assert appended.startswith("Write a poem.") and appended.rstrip().endswith("rain")
    prompts = [{"id": k, **v} for k, v in GOOD.items()]
    items = rs.expand_items(prompts, iterations=2)
    assert len(items) == 2 * 3
    assert [(i["id"], i["modifier"], i["iteration"]) for i in items[:3]] == [("a1", "a fox", 0), ("a1", "a train", 0),
                                                                            ("b2", "rain", 0)]
    assert {i["iteration"] for i in items[3:]} == {1}


def test_bundled_prompts_are_valid():
    got = rs.load_cwv3_prompts(rs.DEFAULT_PROMPTS)
    assert len(got) >= 12
    assert all(2 <= len(p["seed_modifiers"]) <= 4 for p in got)
    assert len({p["writing_prompt"] for p in got}) == len(got)


def test_negative_criteria_are_inverted():
    crits, neg = rs.criteria()
    assert len(crits) == len(neg) >= 16 and 10 <= (~neg).sum() and 6 <= neg.sum()
    assert all(c.max_points == 20 for c in crits)
    pts = np.where(neg, 3.0, 7.0)[None, :].repeat(2, 0)
    pts[1, 0] = np.nan
    inv = rs.invert_negative(pts, neg)
    np.testing.assert_array_equal(inv[0], np.where(neg, 17.0, 7.0))
    assert np.isnan(inv[1, 0])
    # a flaw scored as absent (0) is full marks, a quality scored absent is zero
    assert rs.invert_negative(np.zeros(len(neg)), neg).tolist() == np.where(neg, 20.0, 0.0).tolist()


def test_margins_from_preference_strength():
    p = [1.0, 0.8, 0.7, 0.62, 0.55, 0.5, 0.45, 0.38, 0.3, 0.2, 0.0]
    assert rs.margins(p).tolist() == [3, 3, 2, 2, 1, 0, -1, -2, -2, -3, -3]
    assert [rs.margin_label(m) for m in (3, 1, 0, -2)] == ["A+++", "A+", "=", "B++"]
    np.testing.assert_allclose(rs.margin_targets([3, 2, 1, 0, -1, -3]), [1, 5 / 6, 2 / 3, 0.5, 1 / 3, 0])


def _comps(rows):
    a, b, p = zip(*rows)
    n = len(rows)
    return {"a": np.array(a), "b": np.array(b), "p_a": np.array(p, float), "prompt": np.arange(n) // 2,
            "len_a": np.full(n, 10.0), "len_b": np.full(n, 10.0)}


def test_big_margin_winner_rates_above_small_margin_winner():
    # models 0 and 1 each meet model 2 in both orders on 10 items; 0 always wins by +++, 1 always by +
    rows = []
    for _ in range(10):
        rows += [(0, 2, 0.95), (2, 0, 0.05), (1, 2, 0.55), (2, 1, 0.45)]
    res = rs.rate_margins(_comps(rows), ["big", "small", "loser"])
    elo = {m["name"]: m["elo"] for m in res["models"]}
    assert elo["big"] > elo["small"] > elo["loser"]
    assert res["margin_counts"]["big"]["A+++"] == 20 and res["margin_counts"]["small"]["A+"] == 20
    assert res["margin_counts"]["loser"]["B+++"] == 20 and res["margin_counts"]["loser"]["B+"] == 20
    # the raw preferences would have given the same wins: the gap comes from the margins
    assert elo["big"] - elo["small"] > 100


def test_symmetric_comparisons_give_equal_ratings():
    rows = []
    for p in (0.9, 0.6, 0.75, 0.52):
        rows += [(0, 1, p), (1, 0, p), (0, 1, 1 - p), (1, 0, 1 - p)]
    res = rs.rate_margins(_comps(rows), ["x", "y"])
    elo = {m["name"]: m["elo"] for m in res["models"]}
    assert abs(elo["x"] - elo["y"]) < 1e-6
    assert res["margin_counts"]["x"] == res["margin_counts"]["y"]


@pytest.mark.slow
def test_rubric_score_real_tiny_run(tmp_path, tiny_qwen3):
    """The command line end to end on a tiny random checkpoint (contestant, shuffled copy and judge): nothing
    here depends on what a real model says, only that the suite runs and its files agree with each other;
    the suite's arithmetic on known judge outputs is test_run_with_fake_models_writes_scores_margins_and_report.
    Can take over 30 s on a loaded CI machine: a subprocess (the command line is what is checked) that imports jax
    and compiles its sampler and judge programs, which no other test process shares."""
    ckpt = tiny_qwen3[0]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evals.run", "--suite=rubric_score",
           f"--models=base={ckpt},shuffled=shuffled:{ckpt}",
           f"--judge={ckpt}", "--prompts=1", "--modifiers=1", "--max_new_tokens=16",
           "--score_tokens=24", f"--out={out}", f"--cache_dir={tmp_path / 'cache'}", "--bootstrap=20", "--quiet"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in ("results.json", "report.md", "answers.jsonl", "comparisons.npz", "rubric_scores.png", "ratings.png",
              "win_rates.png"):
        assert (out / f).exists(), f
    import matplotlib.image

    img = matplotlib.image.imread(str(out / "rubric_scores.png"))
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    res = json.loads((out / "results.json").read_text())
    rub = {m["name"]: m for m in res["rubric"]["models"]}
    assert set(rub) == {"base", "shuffled"}
    for m in rub.values():
        assert m["score_20"] is None or abs(m["score_100"] - 5 * m["score_20"]) < 1e-9
        assert m["score_20"] is None or 0 <= m["score_20"] <= 20
    comps = np.load(out / "comparisons.npz")
    assert len(comps["a"]) == 1 * 2  # 1 item (one prompt, one seed modifier) x one pair x both orders
    assert set(zip(comps["a"].tolist(), comps["b"].tolist())) == {(0, 1), (1, 0)}
    assert set(np.abs(comps["margin"]).tolist()) <= {0, 1, 2, 3}
    assert {m["name"] for m in res["pairwise"]["models"]} == {"base", "shuffled"}
    assert set(res["diagnostics"]) == {"base", "shuffled"} and "completion_words/mean" in res["diagnostics"]["base"]
    report = (out / "report.md").read_text()
    assert "Rubric scores" in report and "Pairwise" in report and "Text diagnostics" in report
    assert r.stdout.count("shuffled") >= 2  # the score and ratings tables


class _FakeScorer:
    """Positive criteria get 15, negative (flaw) criteria 5, for every answer of model "good"; 5 and 15 for "bad"."""

    def score(self, prompt, answers, crits):
        flaw = np.array([c.check.startswith("Flaw") for c in crits])
        return np.array([np.where(flaw, 5.0, 15.0) if a.startswith("good") else np.where(flaw, 15.0, 5.0)
                         for a in answers])


class _FakeJudge:
    def p_first(self, prompt, texts, pairs, crits):  # "good" always preferred, by +++
        return np.array([[0.95 if texts[i].startswith("good") else 0.05] * len(crits) for i, j in pairs])


def test_run_with_fake_models_writes_scores_margins_and_report(tmp_path, monkeypatch):
    """The whole suite without a model: generation, scorer and judge replaced by fakes with known answers."""
    import evals.judges
    import evals.models
    from evals.run import parse_args
    from evals.tools import SuiteTools

    monkeypatch.setattr(SuiteTools, "answers", lambda tools, members, prompts, seeds: {
        n: [[f"{n} answer {k} seed {s}" for k, s in enumerate(seeds)]] for n in members})
    monkeypatch.setattr(rs, "make_pointwise", lambda args, tools, spec: _FakeScorer())
    monkeypatch.setattr(evals.judges, "make_judge", lambda *a, **k: _FakeJudge())
    monkeypatch.setattr(evals.models, "load_contestants", lambda cs, *a, **k: {c.name: [None] for c in cs})
    out = tmp_path / "out"
    args = parse_args(["--suite=rubric_score", "--models=bad=smollm2,good=smollm2-135m-instruct",
                       "--judge=smollm2", f"--out={out}", f"--data={_write(tmp_path, GOOD)}", "--iterations=2",
                       "--bootstrap=0", "--quiet"])
    res = rs.run(args)
    rub = {m["name"]: m for m in res["rubric"]["models"]}
    assert rub["good"]["score_20"] == 15.0 and rub["good"]["score_100"] == 75.0  # 15 and 20 - 5
    assert rub["bad"]["score_20"] == 5.0
    assert rub["good"]["per_answer"] == [15.0] * 6 and rub["bad"]["per_answer"] == [5.0] * 6  # items x iterations
    assert res["rubric"]["models"][0]["name"] == "good"
    elo = {m["name"]: m["elo"] for m in res["pairwise"]["models"]}
    assert elo["good"] > elo["bad"] + 400
    assert res["pairwise"]["margin_counts"]["good"]["A+++"] == 3 * 2 * 2  # items x iterations x orders
    answers = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert [a["iteration"] for a in answers] == [0, 0, 0, 1, 1, 1]
    assert answers[0]["prompt"] == "Write about a fox at night."
    for f in ("results.json", "report.md", "rubric_scores.png", "ratings.png", "win_rates.png"):
        assert (out / f).exists(), f
    report = (out / "report.md").read_text()
    assert "Purple prose (inverted)" in report and "A+++" in report and "Text diagnostics" in report
