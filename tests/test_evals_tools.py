"""evals.tools: the output writer's strict JSON, and generation, judges and contestants configured from the
command line (no model: generation and judges are replaced by recorders)."""

import json
import os

import numpy as np
import pytest

from evals.run import parse_args
from evals.tools import OutputWriter, SuiteTools


def _strict(text: str):
    """json.loads that refuses NaN / Infinity tokens, as a strict reader does."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _args(tmp_path, *flags):
    return parse_args(["--models=a=smollm2-135m-instruct", f"--out={tmp_path / 'out'}", *flags])


# ---- the writer ---------------------------------------------------------------------------------------------------

def test_json_writes_nan_and_infinity_as_null_and_keeps_non_ascii(tmp_path):
    w = OutputWriter(str(tmp_path / "new" / "dir"))  # created on first write
    path = w.json("r.json", {"x": float("nan"), "y": [1.5, float("inf"), np.float32(-np.inf)], "name": "café 東京",
                             "n": np.int64(3), "arr": np.array([0.5, np.nan])})
    assert path == str(tmp_path / "new" / "dir" / "r.json")
    text = open(path, encoding="utf-8").read()
    assert _strict(text) == {"x": None, "y": [1.5, None, None], "name": "café 東京", "n": 3, "arr": [0.5, None]}
    assert "café 東京" in text and text.endswith("}\n")
    assert not os.path.exists(path + ".tmp")


def test_jsonl_writes_one_strict_object_per_line(tmp_path):
    w = OutputWriter(str(tmp_path))
    rows = [{"id": 0, "score": float("nan"), "answers": {"a": ["naïve — ok"]}},
            {"id": 1, "score": np.float64(0.25), "answers": {"a": ["plain"]}}]
    path = w.jsonl("answers.jsonl", iter(rows))
    raw = open(path, "rb").read()
    lines = raw.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 3  # every row ends with a newline, nothing else
    assert [_strict(line) for line in lines[:2]] == [{"id": 0, "score": None, "answers": {"a": ["naïve — ok"]}},
                                                     {"id": 1, "score": 0.25, "answers": {"a": ["plain"]}}]
    assert "naïve — ok".encode("utf-8") in raw  # not \u escapes
    # a row without non-finite numbers is written as the suites wrote it before: json.dumps(row, ensure_ascii=False)
    assert lines[1] == json.dumps({"id": 1, "score": 0.25, "answers": {"a": ["plain"]}}, ensure_ascii=False)


def test_text_and_path(tmp_path):
    w = OutputWriter(str(tmp_path / "o"))
    p = w.text("report.md", "# Résumé\n\n| a |\n")
    assert open(p, "rb").read() == "# Résumé\n\n| a |\n".encode("utf-8")
    q = w.path("plot.png")
    assert q == str(tmp_path / "o" / "plot.png") and os.path.isdir(tmp_path / "o")


def test_the_tools_write_into_args_out(tmp_path):
    tools = SuiteTools(_args(tmp_path))
    assert tools.out.dir == str(tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing made before a file is written


# ---- generation ---------------------------------------------------------------------------------------------------

@pytest.fixture
def calls(monkeypatch):
    """Replaces evals.generate.generate_answers: records its keywords, answers "<prompt>|<seed>"."""
    import evals.generate

    seen = []

    def fake(member, prompts, **kw):
        seen.append({"member": member, "prompts": list(prompts), **kw})
        return [f"{p}|{kw['seed']}" for p in prompts]

    monkeypatch.setattr(evals.generate, "generate_answers", fake)
    return seen


def test_generate_passes_the_runs_settings_seed_cache_and_batch_size(tmp_path, calls, monkeypatch):
    from evals.generate import GenSettings

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tools = SuiteTools(_args(tmp_path, "--seed=7", "--batch_size=3", "--max_new_tokens=11",
                                       "--temperature=0.3", "--top_k=5", "--top_p=0.9", "--cache_dir=~/c", "--quiet"))
    assert tools.generate("m", ["p1", "p2"], desc="d") == ["p1|7", "p2|7"]
    assert calls[-1] == {"member": "m", "prompts": ["p1", "p2"], "seed": 7, "batch_size": 3, "progress": False,
                         "desc": "d", "cache_dir": str(tmp_path / "home" / "c"),
                         "settings": GenSettings(max_new_tokens=11, temperature=0.3, top_k=5, top_p=0.9)}
    tools.generate("m", ["p1"], seed=9, settings=GenSettings(max_new_tokens=2))
    assert calls[-1]["seed"] == 9 and calls[-1]["settings"] == GenSettings(max_new_tokens=2)
    loud = SuiteTools(_args(tmp_path))
    loud.generate("m", ["p1"])
    assert calls[-1]["progress"] is True and calls[-1]["seed"] == 0 and calls[-1]["batch_size"] == 8


def test_answers_one_call_per_member_and_seed_in_prompt_order(tmp_path, calls):
    tools = SuiteTools(_args(tmp_path, "--seed=4", "--quiet"))
    members = {"solo": ["s"], "pool": ["p0", "p1"]}
    got = tools.answers(members, ["x", "y", "z"], seeds=[5, 4, 5])
    assert got == {"solo": [["x|5", "y|4", "z|5"]], "pool": [["x|5", "y|4", "z|5"]] * 2}
    assert [(c["member"], c["prompts"], c["seed"], c["desc"]) for c in calls] == [
        ("s", ["y"], 4, "solo"), ("s", ["x", "z"], 5, "solo"),
        ("p0", ["y"], 4, "pool[0]"), ("p0", ["x", "z"], 5, "pool[0]"),
        ("p1", ["y"], 4, "pool[1]"), ("p1", ["x", "z"], 5, "pool[1]")]
    calls.clear()
    assert tools.answers({"solo": ["s"]}, ["x", "y"]) == {"solo": [["x|4", "y|4"]]}  # --seed by default
    assert len(calls) == 1
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        tools.answers(members, ["x", "y", "z"], seeds=[1, 2])


# ---- judges, scorers, contestants ---------------------------------------------------------------------------------

def test_judge_is_built_once_per_spec_with_the_runs_flags(tmp_path, monkeypatch):
    import evals.judges

    made = []

    def fake(spec, cache_dir, **kw):
        made.append((spec, cache_dir, kw))
        return object()

    monkeypatch.setattr(evals.judges, "make_judge", fake)
    tools = SuiteTools(_args(tmp_path, "--judge_questions=both", f"--cache_dir={tmp_path / 'c'}",
                                       "--remote_timeout=7", "--remote_retries=2", "--remote_concurrency=3"))
    a = tools.judge("smollm2-135m-instruct")
    assert tools.judge(" smollm2-135m-instruct ") is a  # the same spec: the same judge
    r = tools.judge("openai:m@http://h/v1")
    assert r is not a and tools.judge("openai:m@http://h/v1") is r
    assert made == [("smollm2-135m-instruct", str(tmp_path / "c"), {"questions": "both"}),
                    ("openai:m@http://h/v1", str(tmp_path / "c"),
                     {"remote": {"timeout_s": 7.0, "max_retries": 2, "concurrency": 3}})]


def test_scorer_gives_local_options_to_an_in_process_judge_only(tmp_path, monkeypatch):
    import evals.scorers

    made = []
    monkeypatch.setattr(evals.scorers, "make_scorer", lambda spec, cache, **kw: made.append((spec, kw)))
    tools = SuiteTools(_args(tmp_path, "--remote_timeout=7", "--remote_concurrency=3"))
    tools.scorer("smollm2-135m-instruct", mode="hard")
    tools.scorer("openai:m@http://h/v1", mode="hard")
    assert made == [("smollm2-135m-instruct", {"mode": "hard"}),
                    ("openai:m@http://h/v1", {"remote": {"timeout_s": 7.0, "concurrency": 3}})]


def test_judge_specs_and_contestants_check_what_a_suite_needs(tmp_path):
    one = SuiteTools(_args(tmp_path, "--judge=j1"))
    assert one.judge_specs() == ["j1"] and one.judge_spec() == "j1"
    two = SuiteTools(_args(tmp_path, "--judge=j0", "--judges=j1, j2"))
    assert two.judge_specs() == ["j1", "j2"]  # --judges overrides --judge
    with pytest.raises(ValueError, match="exactly one judge"):
        two.judge_spec()
    with pytest.raises(ValueError, match="give a judge model"):
        SuiteTools(_args(tmp_path)).judge_specs()
    assert [c.name for c in one.contestants()] == ["a"]
    with pytest.raises(ValueError, match="needs at least 2 contestants, got 1"):
        one.contestants(min_count=2)


def test_log_is_silent_under_quiet(tmp_path, capsys):
    SuiteTools(_args(tmp_path, "--quiet")).log("hidden")
    SuiteTools(_args(tmp_path)).log("shown", end="")
    out = capsys.readouterr()
    assert out.err == "shown" and out.out == ""
