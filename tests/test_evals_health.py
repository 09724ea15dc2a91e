"""evals.suites.health: HealthBench scoring by hand, tag aggregation, the loader and its errors, the bundled
set, and one real tiny run on a tiny random checkpoint."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from evals.suites.health import (bootstrap_mean, load_examples, parse_example, prompt_text, score_example,
                                 tag_scores)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_score_example_by_hand_with_negative_points():
    # positive total 5 + 3 + 2 = 10; met: 5, -4, 2 -> 3 / 10
    assert score_example([5, 3, -4, 2], [True, False, True, True]) == pytest.approx(0.3)
    # a met negative item costs points even when everything positive is met: (5 + 3 + 2 - 4) / 10
    assert score_example([5, 3, -4, 2], [True, True, True, True]) == pytest.approx(0.6)


def test_score_example_clips_both_ends():
    # lower end: only the harmful item met -> -4 / 10, clipped to 0
    assert score_example([5, 3, -4, 2], [False, False, True, False]) == 0.0
    assert score_example([1, -9], [True, True]) == 0.0
    # upper end: every positive item met and no negative one -> exactly 1, never above
    assert score_example([5, 3, -4, 2], [True, True, False, True]) == 1.0
    assert score_example([0.5, 0.5], [True, True]) == 1.0
    # nothing met
    assert score_example([5, 3, -4, 2], [False] * 4) == 0.0
    # no positive points: undefined
    assert np.isnan(score_example([-1, -2], [True, False]))


def _ex(items, etags):
    return {"rubrics": [{"criterion": f"c{k}", "points": p, "tags": t} for k, (p, t) in enumerate(items)],
            "example_tags": etags}


def test_tag_scores_by_hand():
    exs = [_ex([(4, ["axis:accuracy"]), (2, ["axis:communication"]), (-3, ["axis:accuracy"])], ["theme:a"]),
           _ex([(6, ["axis:accuracy"]), (2, ["axis:completeness"])], ["theme:a", "theme:b"]),
           _ex([(1, ["axis:communication"]), (-2, ["axis:communication"])], ["theme:b"])]
    met = [[True, True, True], [False, True], [True, True]]
    r = tag_scores(exs, met, reps=0)
    # per example: (4 + 2 - 3) / 6 = 0.5; 2 / 8 = 0.25; (1 - 2) / 1 -> 0
    assert r["per_example"] == pytest.approx([0.5, 0.25, 0.0])
    assert r["overall"]["mean"] == pytest.approx(0.75 / 3) and r["overall"]["n"] == 3
    t = r["tags"]
    assert t["theme:a"]["mean"] == pytest.approx(0.375) and t["theme:a"]["n"] == 2
    assert t["theme:b"]["mean"] == pytest.approx(0.125)
    # item-level tags: score restricted to the tag's items. accuracy: ex0 (4 - 3) / 4, ex1 0 / 6
    assert t["axis:accuracy"]["mean"] == pytest.approx((0.25 + 0.0) / 2) and t["axis:accuracy"]["n"] == 2
    # communication: ex0 2 / 2 = 1, ex2 (1 - 2) / 1 -> 0
    assert t["axis:communication"]["mean"] == pytest.approx(0.5)
    assert t["axis:completeness"]["mean"] == pytest.approx(1.0) and t["axis:completeness"]["n"] == 1
    assert r["overall"]["lo"] is None


def test_bootstrap_mean_interval():
    m, lo, hi = bootstrap_mean([0.0, 1.0, 0.5, 0.25], reps=500, seed=1)
    assert m == pytest.approx(0.4375)
    assert 0.0 <= lo < m < hi <= 1.0
    assert bootstrap_mean([0.7, 0.7, 0.7], reps=100) == pytest.approx((0.7, 0.7, 0.7))


PUBLIC = [
    {"prompt": [{"role": "user", "content": "I have a headache."},
                {"role": "assistant", "content": "How long has it lasted?"},
                {"role": "user", "content": "Two days, and my neck is stiff."}],
     "rubrics": [{"criterion": "Advises urgent care for headache with a stiff neck.", "points": 8,
                  "tags": ["axis:accuracy"]},
                 {"criterion": "Says it is surely a tension headache.", "points": -5, "tags": ["axis:accuracy"]}],
     "example_tags": ["theme:emergency_referrals"], "prompt_id": "abc-1"},
    {"prompt": [{"role": "user", "content": "Is coffee bad for me?"}],
     "rubrics": [{"criterion": "Mentions moderate intake is fine for most adults.", "points": 3.5,
                  "tags": ["axis:completeness", "level:example"]}],
     "example_tags": [], "prompt_id": "abc-2"},
]


def test_loader_reads_public_format(tmp_path):
    path = tmp_path / "hb.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in PUBLIC) + "\n\n")
    exs = load_examples(str(path))
    assert [e["prompt_id"] for e in exs] == ["abc-1", "abc-2"]
    assert [r["points"] for r in exs[0]["rubrics"]] == [8.0, -5.0]
    assert exs[1]["rubrics"][0]["tags"] == ["axis:completeness", "level:example"]
    text = prompt_text(exs[0]["messages"])
    assert text.endswith("Two days, and my neck is stiff.")
    assert "How long has it lasted?" in text and "I have a headache." in text
    assert prompt_text(exs[1]["messages"]) == "Is coffee bad for me?"
    assert len(load_examples(str(path), 1)) == 1
    with pytest.raises(ValueError, match="only 2"):
        load_examples(str(path), 3)


@pytest.mark.parametrize("mutate,msg", [
    (lambda r: r.pop("rubrics"), "missing field 'rubrics'"),
    (lambda r: r.update(rubrics={"criterion": "x", "points": 1}), "must be a non-empty list"),
    (lambda r: r["rubrics"][1].update(points="five"), r"rubrics\[1\].points must be a number"),
    (lambda r: r.update(prompt=[]), "non-empty list of chat messages"),
    (lambda r: r["rubrics"][0].pop("criterion"), r"rubrics\[0\].criterion"),
    (lambda r: r.update(prompt=[{"role": "user"}]), r"prompt\[0\]"),
])
def test_loader_names_bad_line(tmp_path, mutate, msg):
    bad = json.loads(json.dumps(PUBLIC[0]))
    mutate(bad)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(PUBLIC[1]) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=msg) as e:
        load_examples(str(path))
    assert f"{path}:3:" in str(e.value)  # file and line (blank line 2 still counts)


def test_loader_bad_json_and_missing_file(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(PUBLIC[1]) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"x.jsonl:2: not valid JSON"):
        load_examples(str(path))
    with pytest.raises(FileNotFoundError):
        load_examples(str(tmp_path / "none.jsonl"))
    with pytest.raises(ValueError, match="no rubric item has positive points"):
        parse_example({"prompt": [{"role": "user", "content": "q"}],
                       "rubrics": [{"criterion": "c", "points": -1, "tags": []}]}, "f", 1)


def test_bundled_set():
    exs = load_examples(os.path.join(ROOT, "evals", "data", "health_eval.jsonl"))
    assert len(exs) >= 60
    assert len({e["prompt_id"] for e in exs}) == len(exs)
    assert all(3 <= len(e["rubrics"]) <= 7 for e in exs)
    assert sum(any(r["points"] < 0 for r in e["rubrics"]) for e in exs) >= 20
    themes = {t for e in exs for t in e["example_tags"] if t.startswith("theme:")}
    assert {"theme:emergency", "theme:medication", "theme:mental_health", "theme:pediatrics",
            "theme:nutrition", "theme:chronic_conditions"} <= themes
    axes = {t for e in exs for r in e["rubrics"] for t in r["tags"]}
    assert {"axis:accuracy", "axis:completeness", "axis:communication"} <= axes
    assert any(len(e["messages"]) > 1 for e in exs)  # some multi-turn conversations


@pytest.mark.slow
def test_health_real_tiny_run(tmp_path, tiny_qwen3):
    """2 examples, 16 new tokens, base against its shuffled copy, on a tiny random checkpoint (contestant and
    judge). No ordering is asserted (even the embedded 135M judge marks every item of both answers as met):
    only that the command runs end to end and writes consistent files; that a judge which can read word order
    ranks the model above its shuffled copy is
    test_a_judge_that_reads_word_order_ranks_the_model_above_its_shuffled_copy.
    Can take over 30 s on a loaded CI machine: a subprocess (the command line is what is checked) that imports jax
    and compiles its sampler and judge programs, which no other test process shares."""
    ckpt = tiny_qwen3[0]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evals.run", "--suite=health",
           f"--models=base={ckpt},shuf=shuffled:{ckpt}",
           f"--judge={ckpt}", "--prompts=2", "--max_new_tokens=16", "--batch_size=2",
           "--bootstrap=50", f"--cache_dir={tmp_path / 'cache'}", f"--out={out}"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in ("results.json", "report.md", "health_scores.png", "answers.jsonl"):
        assert (out / f).stat().st_size > 0, f
    res = json.loads((out / "results.json").read_text())
    assert set(res["models"]) == {"base", "shuf"}
    assert len(res["examples"]) == 2
    for m in res["models"].values():
        assert 0.0 <= m["overall"]["mean"] <= 1.0 and m["overall"]["n"] == 2
        assert "theme:emergency" in m["tags"] and "axis:accuracy" in m["tags"]
        assert "diversity/distinct_1" in m["diagnostics"] and "completion_len/mean" in m["diagnostics"]
    # per-example scores in the file agree with the met flags through score_example
    exs = load_examples(os.path.join(ROOT, "evals", "data", "health_eval.jsonl"), 2)
    for ex, row in zip(exs, res["examples"]):
        for name in ("base", "shuf"):
            assert row["scores"][name] == pytest.approx(
                score_example([i["points"] for i in ex["rubrics"]], row["met"][name]))
    assert "| base |" in (out / "report.md").read_text()


def test_a_judge_that_reads_word_order_ranks_the_model_above_its_shuffled_copy(tmp_path, monkeypatch):
    """The whole suite with a judge double that can tell coherent text from its word-shuffled copy
    (tests/evals_coherence_double.py): the coherent model scores higher overall and on most examples."""
    from evals.run import parse_args
    from evals.suites import health
    from evals_coherence_double import install

    install(monkeypatch)
    out = tmp_path / "out"
    res = health.run(parse_args(["--suite=health", "--models=base=smollm2-135m-instruct,shuf=shuffled:smollm2",
                                 "--judge=smollm2-135m-instruct", "--prompts=8", "--bootstrap=50", f"--out={out}",
                                 f"--cache_dir={tmp_path / 'cache'}", "--quiet"]))
    base, shuf = res["models"]["base"], res["models"]["shuf"]
    assert base["overall"]["mean"] > shuf["overall"]["mean"]
    assert base["met_rate"] > 0.9 > 0.3 > shuf["met_rate"]
    wins = sum(e["scores"]["base"] > e["scores"]["shuf"] for e in res["examples"])
    assert wins >= 6, [e["scores"] for e in res["examples"]]
    assert (out / "report.md").exists() and (out / "health_scores.png").exists()
