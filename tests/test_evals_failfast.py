"""evals.run checks its inputs before any answer is generated, and a failed run leaves no partial outputs.

Generation and model loading are replaced by recorders: each test asserts they were never reached (or, for a
healthy run, that the judge's test request came first). No model is loaded; the remote judge is the stub of
tests/chat_stub.py or a port nobody listens on.
"""

import os

import pytest

import evals.generate
import evals.models
import evals.suites.gv_gap  # noqa: F401  (imported here so its import is not timed as a test)
import evals.suites.pairwise_elo as pairwise_elo
from chat_stub import chat_stub
from evals.run import main
from serve_fixture import free_port
from rubric_jax.openai_client import ChatError

MODELS = "--models=a=smollm2-135m-instruct,b=shuffled:smollm2-135m-instruct"
JUDGE = "--judge=smollm2-135m-instruct"


@pytest.fixture
def work(monkeypatch):
    """Records every call that would generate an answer or load a model."""
    calls = []

    def record(what):
        def f(*a, **k):
            calls.append(what)
            raise AssertionError(f"{what} reached")
        return f

    monkeypatch.setattr(evals.generate, "generate_answers", record("generate_answers"))  # the suites' tools call it there
    monkeypatch.setattr(evals.generate, "sample", record("sample"))
    monkeypatch.setattr(evals.models.LoadedMember, "_load", record("load"))
    return calls


def _run(tmp_path, *flags):
    return main(["--suite=pairwise_elo", MODELS, f"--out={tmp_path / 'out'}", f"--cache_dir={tmp_path / 'cache'}",
                 "--quiet", *flags])


def _no_outputs(tmp_path) -> bool:
    out = tmp_path / "out"
    return not out.exists() or not os.listdir(out)


# ---- the judge -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("judge,rc,says", [
    ("--judge=no-such-judge-model", 2, "--judge: 'no-such-judge-model': no such file or directory"),
    ("--judges=smollm2-135m-instruct,shuffled:smollm2-135m-instruct", 2, "a shuffled model cannot judge"),
    ("--judge=openai:gpt-4o-mini", 2, "--judge 'openai:gpt-4o-mini': chat client spec must look like"),
])
def test_bad_judge_spec_stops_before_generation(work, tmp_path, capsys, judge, rc, says):
    assert _run(tmp_path, judge) == rc
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err, err
    assert work == [] and _no_outputs(tmp_path)


@pytest.mark.parametrize("flags,says", [
    (["--judge=smollm2-135m-instruct", "--judge_questions=both", "--suite=health"],
     "--judge_questions=both: the health suite asks no pairwise question"),
    (["--judge=openai:m@http://127.0.0.1:9/v1", "--judge_questions=worse"],
     "--judge_questions=worse: a remote judge answers the better question only"),
])
def test_a_question_the_judge_cannot_be_asked_stops_before_generation(work, tmp_path, capsys, flags, says):
    assert _run(tmp_path, *flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err, err
    assert work == [] and _no_outputs(tmp_path)


def test_dead_endpoint_stops_before_generation(work, tmp_path, capsys):
    spec = f"openai:m@http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    assert _run(tmp_path, f"--judge={spec}", "--remote_retries=0", "--remote_timeout=2") == 1
    err = capsys.readouterr().err
    assert f"error: judge {spec!r} did not answer a test request" in err and "connection error" in err, err
    assert work == [] and _no_outputs(tmp_path)


def test_dead_reference_judge_stops_gv_gap_before_generation(work, tmp_path, capsys):
    spec = f"openai:m@http://127.0.0.1:{free_port()}/v1"
    rc = main(["--suite=gv_gap", "--models=policy=smollm2-135m-instruct", JUDGE, f"--reference_judge={spec}",
               "--remote_retries=0", f"--out={tmp_path / 'out'}", f"--cache_dir={tmp_path / 'cache'}", "--quiet"])
    assert rc == 1 and f"judge {spec!r} did not answer" in capsys.readouterr().err
    assert work == []


def test_the_judge_is_asked_once_before_any_answer(tmp_path, monkeypatch, capsys):
    """A healthy remote judge: exactly one test request, sent before the suite starts; the suite's outputs
    then land in --out (written through the staging directory)."""
    with chat_stub() as stub:
        seen = {}

        def suite(args, tools):
            seen["hits"] = stub.hits("ok")
            seen["out"] = args.out
            seen["writer"] = tools.out.dir
            with open(os.path.join(args.out, "results.json"), "w") as f:
                f.write("{}")

        monkeypatch.setattr(pairwise_elo, "run", suite)
        assert _run(tmp_path, f"--judge=openai:m@{stub.url}/ok/v1") == 0
    assert seen["hits"] == 1  # the test request, and nothing else, before the suite ran
    out = tmp_path / "out"
    assert seen["out"] != str(out) and not os.path.exists(seen["out"])  # the stage is gone
    assert seen["writer"] == seen["out"]  # the tools write into the stage too
    assert os.listdir(out) == ["results.json"]


# ---- --data ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,says", [
    ('{"prompt": "Write a poem."}\n{"prompt": "Write a story.",\n', ":2: malformed JSON"),
    ('{"prompt": "Write a poem."}\n\n{"id": "q2", "task": "creative_writing"}\n', ':3: missing required key "prompt"'),
    ("", "no records (the file is empty)"),
    ("\n  \n", "no records (the file is empty)"),
])
def test_bad_data_file_is_named_before_work(work, tmp_path, capsys, text, says):
    data = tmp_path / "prompts.jsonl"
    data.write_text(text)
    assert _run(tmp_path, JUDGE, f"--data={data}") == 2
    err = capsys.readouterr().err
    assert f"error: --data: {data}" in err and says in err, err
    assert work == [] and _no_outputs(tmp_path)


def test_missing_data_file(work, tmp_path, capsys):
    assert _run(tmp_path, JUDGE, f"--data={tmp_path / 'nope.jsonl'}") == 2
    assert f"error: --data: no such file: {tmp_path / 'nope.jsonl'}" in capsys.readouterr().err
    assert work == []


def test_out_that_is_a_file(work, tmp_path, capsys):
    (tmp_path / "out").write_text("not a directory")
    assert _run(tmp_path, JUDGE) == 2
    assert f"error: --out: {tmp_path / 'out'} exists and is not a directory" in capsys.readouterr().err
    assert work == []


# ---- outputs of a failed run -----------------------------------------------------------------------------------------

def test_a_failed_run_leaves_no_partial_outputs(tmp_path, monkeypatch, capsys):
    """The suite writes answers.jsonl, then the judge fails: a rerun must find no new answers.jsonl, and a
    finished earlier run's files stay as they were."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"earlier": true}')

    def suite(args, tools):
        with open(os.path.join(args.out, "answers.jsonl"), "w") as f:
            f.write('{"id": 0}\n')
        with open(os.path.join(args.out, "results.json"), "w") as f:
            f.write('{"half": true}')
        raise ChatError("giving up after 1 attempts")

    monkeypatch.setattr(pairwise_elo, "run", suite)
    assert _run(tmp_path, JUDGE) == 1
    assert "rerun to resume" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["results.json"]  # no answers.jsonl, no staging directory
    assert (out / "results.json").read_text() == '{"earlier": true}'


def test_a_failed_run_removes_the_out_dir_it_created(tmp_path, monkeypatch, capsys):
    def suite(args, tools):
        open(os.path.join(args.out, "answers.jsonl"), "w").close()
        raise KeyboardInterrupt

    monkeypatch.setattr(pairwise_elo, "run", suite)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, JUDGE)
    assert not (tmp_path / "out").exists()
