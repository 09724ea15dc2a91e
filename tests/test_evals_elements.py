"""evals suite elements: the bundled element lists, seeded draws, prompts, question sets, the per-model summary
and one real end-to-end run on a tiny random checkpoint."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from evals.suites import elements as el

XLA_OPTIMIZED = True  # its runs sample and judge for many steps (conftest._xla_optimisation)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bundled_lists_cover_every_kind():
    lists = el.load_elements()
    assert list(lists) == list(el.KINDS) and len(el.KINDS) == 10
    for kind, entries in lists.items():
        assert len(entries) >= 15, kind
        assert len(set(entries)) == len(entries), kind


def test_bad_element_file_names_the_kind(tmp_path):
    data = el.load_elements()
    data["setting"] = []
    p = tmp_path / "e.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="'setting'"):
        el.load_elements(str(p))


def test_draws_are_deterministic_distinct_and_in_the_prompt():
    lists = el.load_elements()
    seen = set()
    for story in range(20):
        d = el.draw_elements(lists, 6, seed=3, story=story)
        assert d == el.draw_elements(lists, 6, seed=3, story=story)
        kinds = [k for k, _ in d]
        assert len(kinds) == 6 == len(set(kinds))
        assert kinds == [k for k in el.KINDS if k in kinds]  # canonical order
        assert all(e in lists[k] for k, e in d)
        prompt = el.story_prompt(d, 300, 500)
        assert all(e in prompt and f"{k}: {e}" in prompt for k, e in d)
        assert "300" in prompt and "500" in prompt
        seen.add(tuple(d))
    assert len(seen) > 15  # draws differ between stories
    other = [el.draw_elements(lists, 6, seed=4, story=s) for s in range(20)]
    assert other != [el.draw_elements(lists, 6, seed=3, story=s) for s in range(20)]
    assert [k for k, _ in el.draw_elements(lists, 10, 0, 0)] == list(el.KINDS)
    for n in (0, 11):
        with pytest.raises(ValueError, match="--elements"):
            el.draw_elements(lists, n, 0, 0)


def test_questions_are_craft_then_one_per_element():
    d = [("object", "a jar of buttons"), ("tone", "deadpan")]
    crits, ids = el.questions(d)
    assert ids == [q for q, _, _ in el.CRAFT] + ["int:object", "int:tone"] and len(el.CRAFT) == 8
    assert all(c.max_points == 10 for c in crits)
    assert "a jar of buttons" in crits[8].check and "deadpan" in crits[9].check
    assert len({c.id for c in crits}) == len(crits)


def test_summary_formulas():
    nan = float("nan")
    grades = {"m": [{"q1_character": 4.0, "q2_plot": 6.0, "int:tone": 10.0},
                    {"q1_character": 2.0, "q2_plot": nan, "int:object": 0.0}]}
    s = el.summarise(grades)["m"]
    # story scores: (4 + 6 + 10) / 3 and (2 + 0) / 2
    assert s["score"] == pytest.approx((20 / 3 + 1) / 2)
    assert s["craft"] == pytest.approx((5 + 2) / 2) and s["integration"] == pytest.approx((10 + 0) / 2)
    assert s["per_question"] == {"q1_character": 3.0, "q2_plot": 6.0, "int:tone": 10.0, "int:object": 0.0}
    assert s["unreadable"] == pytest.approx(1 / 6)


@pytest.mark.slow
def test_elements_real_tiny_run(tmp_path, tiny_qwen3):
    """The command line end to end on a tiny random checkpoint (contestant, shuffled copy and judge): nothing
    here depends on what a real model says, only that the suite runs and its files agree with each other;
    the suite's arithmetic on known scores is test_run_with_fake_models.
    Can take over 30 s on a loaded CI machine: a subprocess (the command line is what is checked) that imports jax
    and compiles its sampler and judge programs, which no other test process shares."""
    ckpt = tiny_qwen3[0]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evals.run", "--suite=elements",
           f"--models=base={ckpt},shuffled=shuffled:{ckpt}",
           f"--judge={ckpt}", "--stories=1", "--elements=2", "--max_new_tokens=16",
           "--min_words=5", "--max_words=40", "--score_tokens=24", f"--out={out}",
           f"--cache_dir={tmp_path / 'cache'}", "--quiet"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in ("results.json", "report.md", "answers.jsonl", "heatmap.png"):
        assert (out / f).exists(), f
    import matplotlib.image

    img = matplotlib.image.imread(str(out / "heatmap.png"))
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    res = json.loads((out / "results.json").read_text())
    assert {m["name"] for m in res["models"]} == {"base", "shuffled"}
    assert len(res["questions"]) == 8 + 2 and res["questions"][8].startswith("int:")
    story = json.loads((out / "answers.jsonl").read_text().splitlines()[0])
    assert story["elements"] == [list(e) for e in el.draw_elements(el.load_elements(), 2, 0, 0)]
    for m in res["models"]:
        assert set(m["per_question"]) == set(res["questions"])
        vals = [v for v in m["per_question"].values() if v is not None]
        assert all(0 <= v <= 10 for v in vals)
    assert "completion_words/mean" in res["diagnostics"]["shuffled"]
    report = (out / "report.md").read_text()
    assert "heatmap.png" in report and "int:" in report and "Text diagnostics" in report


class _FakeScorer:
    """Model "good" gets 8 on craft and 6 on integration questions, everyone else 2 and 1."""

    def score(self, prompt, answers, crits):
        integ = np.array([c.name.startswith("Integration") for c in crits])
        return np.array([np.where(integ, 6.0, 8.0) if a.startswith("good") else np.where(integ, 1.0, 2.0)
                         for a in answers])


def test_run_with_fake_models(tmp_path, monkeypatch):
    import evals.models
    from evals.run import parse_args
    from evals.tools import SuiteTools

    monkeypatch.setattr(SuiteTools, "answers", lambda tools, members, prompts, seeds=None: {
        n: [[f"{n} " + "word " * (5 if n == "good" else 50) for _ in prompts]] for n in members})
    monkeypatch.setattr(el, "make_pointwise", lambda args, tools, spec: _FakeScorer())
    monkeypatch.setattr(evals.models, "load_contestants", lambda cs, *a, **k: {c.name: [None] for c in cs})
    out = tmp_path / "out"
    res = el.run(parse_args(["--suite=elements", "--models=bad=smollm2,good=smollm2-135m-instruct",
                             "--judge=smollm2", f"--out={out}", "--stories=3", "--elements=4", "--min_words=3",
                             "--max_words=10", "--quiet"]))
    by = {m["name"]: m for m in res["models"]}
    assert res["models"][0]["name"] == "good"
    assert by["good"]["craft"] == 8.0 and by["good"]["integration"] == 6.0
    assert by["good"]["score"] == pytest.approx((8 * 8 + 6 * 4) / 12)
    assert by["good"]["per_story"] == pytest.approx([(8 * 8 + 6 * 4) / 12] * 3)
    assert by["bad"]["per_story"] == pytest.approx([(2 * 8 + 1 * 4) / 12] * 3)
    assert by["good"]["in_word_range"] == 1.0 and by["bad"]["in_word_range"] == 0.0
    assert res["questions"][:8] == [q for q, _, _ in el.CRAFT]
    assert len(res["stories"]) == 3 and all(len(s["elements"]) == 4 for s in res["stories"])
    for f in ("results.json", "report.md", "heatmap.png", "answers.jsonl"):
        assert (out / f).exists(), f
