"""Every bad input is named before a model loads: a prompt file's malformed line, emptiness, missing field or
non-UTF-8 bytes (file and line), a misspelled rubric (with the closest name), an unwritable workdir, a bad
sampling setting and a taken port. Each entry point prints it as one line on stderr and exits with status 2;
the model loader is replaced by one that records the call, and must not have been called."""

import argparse
import os
import socket
import subprocess
import sys

import pytest

import rubric_jax.main as main_mod
import rubric_jax.rl.trainer  # noqa: F401  (imported here, not inside the first timed test)
import rubric_jax.sampling.__main__ as sampling_cli
from rubric_jax import errors, serve
from rubric_jax.rl import setup as setup_mod

from conftest import load_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dead_url() -> str:
    """An address where nothing listens (a port just freed): connections are refused at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def _train_case(tmp_path, *, data=None, rubric=None, workdir=None, config="rcrl", **over):
    """What `python -m rubric_jax.main` runs once its flags are parsed, on a tiny config (rcrl's by default;
    `over`: "section__key" overrides)."""
    c = load_config(config, "tiny")
    with c.unlocked():
        for key, value in over.items():
            section, field = key.split("__")
            c[section][field] = value
        if data is not None:
            path = tmp_path / "prompts.jsonl"
            path.write_bytes(data)
            c.data.path = str(path)
        if rubric is not None:
            c.rubric = rubric
    wd = str(workdir or tmp_path / "run")
    return lambda: main_mod.run(c, wd)


def _read_only_dir(tmp_path):
    d = tmp_path / "read_only"
    d.mkdir()
    d.chmod(0o500)
    return d / "run"


def _chmod_bites(tmp_path) -> bool:
    """False for root (euid 0 with CAP_DAC_OVERRIDE), who writes into a read-only directory anyway."""
    d = tmp_path / "probe"
    d.mkdir()
    d.chmod(0o500)
    try:
        (d / "f").write_text("")
    except PermissionError:
        return True
    finally:
        d.chmod(0o700)
    return False


def _file(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("")
    return f


def _taken_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


CASES = {
    "malformed_json_line": lambda t: (_train_case(t, data=b'{"prompt": "a"}\n{"prompt": "b",\n'),
                                      [f"{t / 'prompts.jsonl'}:2: malformed JSON"]),
    "empty_file": lambda t: (_train_case(t, data=b""), [f"{t / 'prompts.jsonl'}: no records"]),
    "missing_prompt_field": lambda t: (_train_case(t, data=b'{"id": "x", "text": "hi"}\n'),
                                       [f"{t / 'prompts.jsonl'}:1: ", '"prompt"']),
    "non_utf8_bytes": lambda t: (_train_case(t, data=b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n'),
                                 [f"{t / 'prompts.jsonl'}:2: not UTF-8", "0xe9"]),
    "misspelled_rubric": lambda t: (_train_case(t, rubric="creative_writng"),
                                    ["config.rubric='creative_writng'", "did you mean 'creative_writing'"]),
    "unwritable_workdir": lambda t: (_train_case(t, workdir=_read_only_dir(t)),
                                     ["--workdir=", "cannot write to", "read_only"]),
    "workdir_under_a_file": lambda t: (_train_case(t, workdir=_file(t) / "run"), ["--workdir=", "cannot write to"]),
    # the reward method's own inputs, read before the model loads (rubric_jax.methods: validate, prepare)
    "rlmr_unknown_constraint": lambda t: (_train_case(t, config="rlmr", data=b'{"id": "q1", "prompt": "a", '
                                                      b'"constraints": [{"type": "no_such_kind"}]}\n'),
                                          ["record 'q1'", "unknown constraint type 'no_such_kind'"]),
    "rare_writer_spec": lambda t: (_train_case(t, config="rare", rare__writer="gpt-4o"),
                                   ["config.rare.writer='gpt-4o'", "'local' or 'openai:MODEL@BASE_URL'"]),
    "rare_dead_remote_judge": lambda t: (_train_case(t, config="rare", rare__judge=f"openai:m@{_dead_url()}"),
                                         ["config.rare.judge='openai:m@", "did not answer a test request"]),
    "negative_max_new_tokens": lambda t: (lambda: sampling_cli.main(["--prompt", "hi", "--max_new_tokens", "-3"]),
                                          ["--max_new_tokens=-3", ">= 1"]),
}


@pytest.mark.parametrize("case", [*CASES, "taken_port"])
def test_a_bad_input_is_one_line_naming_it_before_the_model_loads(case, tmp_path, monkeypatch, capsys):
    if case == "unwritable_workdir" and not _chmod_bites(tmp_path):
        pytest.skip("root writes into a read-only directory: chmod does not bite")
    loads = []

    def loader(*a, **k):
        loads.append(a)
        raise AssertionError("the model was loaded before the bad input was found")

    monkeypatch.setattr(setup_mod, "load_model", loader)
    monkeypatch.setattr(sampling_cli, "load_model", loader)
    monkeypatch.setattr(serve, "load_for_serving", loader)
    monkeypatch.delenv(errors.TRACEBACK_ENV, raising=False)
    if case == "taken_port":
        held = _taken_port()
        host, port = held.getsockname()
        run, names = lambda: serve.main(["--port", str(port)]), [f"{host}:{port}", "already in use"]
    else:
        held = None
        run, names = CASES[case](tmp_path)
    try:
        with pytest.raises(SystemExit) as exit_info, errors.reported():
            run()
    finally:
        if held is not None:
            held.close()
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for name in names:
        assert name in err, (name, err)
    assert loads == [], "the model loader was called"


@pytest.mark.slow  # an interpreter start: `import rubric_jax` alone takes ~3 s on 2 busy cores
def test_python_m_main_with_a_bad_prompt_file_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": "b",\n')
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(errors.TRACEBACK_ENV, None)
    p = subprocess.run([sys.executable, "-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny",
                        f"--workdir={tmp_path / 'run'}", f"--config.data.path={bad}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {bad}:2: malformed JSON: Expecting property name enclosed in double quotes (column 16)"]


def test_the_traceback_env_var_lets_a_user_error_through_and_other_errors_always_pass(monkeypatch):
    monkeypatch.setenv(errors.TRACEBACK_ENV, "1")
    with pytest.raises(errors.UserError, match="--max_new_tokens=0"):
        with errors.reported():
            sampling_cli._sample(argparse.Namespace(max_new_tokens=0, num_samples=1, temperature=1.0, top_k=0,
                                                    top_p=1.0, min_p=0.0))
    monkeypatch.delenv(errors.TRACEBACK_ENV)
    with pytest.raises(KeyError):
        with errors.reported():
            raise KeyError("a bug keeps its traceback")


def test_sampling_refuses_a_prompt_past_the_context_before_generating(tmp_path, monkeypatch, capsys):
    """A prompt that with --max_new_tokens runs past the model's context is one line naming both numbers and the
    most tokens that fit, before any generation (past the context the model samples garbage, for minutes)."""
    from conftest import write_tiny_checkpoint

    d = str(tmp_path / "tiny")
    write_tiny_checkpoint(d, "qwen3", tied=True, seed=0, max_position_embeddings=64)
    monkeypatch.setattr(sampling_cli, "generate_tokens",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("generated past the context")))
    monkeypatch.delenv(errors.TRACEBACK_ENV, raising=False)
    capsys.readouterr()  # the checkpoint writer's progress bar
    with pytest.raises(SystemExit) as exit_info:
        sampling_cli.main(["--model", d, "--prompt", "short", "--prompt", "word " * 80, "--max_new_tokens", "8"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --prompt 2 is ") and "past this model's context of 64 tokens" in err, err
    n = int(err.split("--prompt 2 is ")[1].split()[0])
    assert n > 64 and err.endswith(f"the prompt alone fills the context: shorten it by at least {n - 63} tokens"), err
    # a prompt that fits alone: the way out is fewer new tokens, as many as fit
    with pytest.raises(SystemExit):
        sampling_cli.main(["--model", d, "--prompt", "word " * 30, "--max_new_tokens", "40"])
    err = capsys.readouterr().err.strip()
    n = int(err.split("--prompt 1 is ")[1].split()[0])
    assert n < 64 < n + 40 and err.endswith(f"lower --max_new_tokens to at most {64 - n}"), err
