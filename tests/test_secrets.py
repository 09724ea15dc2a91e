"""No API key in any message, log line, cache file or printed output, whatever a server sends back.

A stub server (tests/chat_stub.py) echoes the request's Authorization header in every kind of answer: a
non-JSON 200, a 4xx JSON error, a 5xx HTML page, a 200 without choices, a completion quoting it, and a
timeout; and in a response header, which httpcore logs at debug level. Every check first shows that the key
was really sent back (so it can fail), then that the client, RARE's remote scorer, the evals judges and
`python -m evals.run` never repeat it.
"""

import asyncio
import glob
import json
import logging
import urllib.parse

import pytest

from chat_stub import chat_stub
from rubric_jax.openai_client import ChatClient, ChatError, redact

SECRET = "sk-secret-test-0123456789abcdef"
KEY_ENV = "RUBRIC_JAX_SECRETS_TEST_KEY"
MSG = [{"role": "user", "content": "Say A."}]


@pytest.fixture(scope="module")
def stub():
    with chat_stub(slow_s=0.6) as s:
        yield s


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # what RARE's scorer, the evals judges and evals.run read
    return SECRET


def _echoed(stub, route) -> bool:
    return any(r == route and SECRET in body for r, body in stub.sent)


def _leaks(caplog, *texts) -> list[str]:
    """Every captured log message and given text that holds the key."""
    msgs = [r.getMessage() for r in caplog.records] + [str(t) for t in texts]
    return [m for m in msgs if SECRET in m]


def _client(stub, route, **kw) -> ChatClient:
    kw = {"max_retries": 0, "backoff_s": 0.01, "timeout_s": 0.2, **kw}
    return ChatClient(f"{stub.url}/{route}/v1", "m", api_key_env=KEY_ENV, **kw)


# ---- the shared redaction ------------------------------------------------------------------------------------------

def test_redact_forms():
    assert redact(f"key {SECRET}!", [SECRET]) == "key ***!"
    assert redact("Authorization: Bearer sk-other-9f8e7d6c5b4a", []) == "Authorization: Bearer ***"
    assert redact("the Bearer shrugged and walked on", []) == "the Bearer shrugged and walked on"  # prose stays
    odd = "k3y\"with/quote'&plus+sign 42"
    # as it is, in a JSON body, in a repr, URL-encoded (path or query form)
    for form in (odd, json.dumps(odd), repr(odd), urllib.parse.quote(odd, safe=""), urllib.parse.quote_plus(odd)):
        assert "k3y" not in redact(f"body: {form}", [odd]), form
    assert redact("nothing", [None, ""]) == "nothing"
    # redaction comes before any cut: no prefix of the key survives a message cut after it
    assert SECRET[:8] not in redact(("x" * 290 + SECRET), [SECRET])[:300]


# ---- the client ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("route,retries,expect", [
    ("nonjson", 0, "not JSON"),
    ("error4xx", 0, "HTTP 401"),
    ("error5xx", 1, "HTTP 502"),
    ("malformed", 0, "malformed chat completion"),
    ("slow", 0, "timed out"),
])
def test_client_errors_logs_and_cache_hold_no_key(stub, key, caplog, tmp_path, route, retries, expect):
    caplog.set_level(logging.DEBUG)
    c = _client(stub, route, max_retries=retries, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ChatError, match=expect) as e:
        asyncio.run(c.achat(MSG, max_tokens=2))
    assert _echoed(stub, route)  # the server did send the key back
    assert not _leaks(caplog, e.value, repr(e.value), e.value.args)
    if route != "slow":  # a timeout never reads the answer; the others quote it, with the key blanked out
        assert "***" in str(e.value)
        # httpcore logged the echoed response header, redacted
        assert any("X-Echo-Authorization" in r.getMessage() and "***" in r.getMessage() for r in caplog.records)
    if retries:  # the retry warning quotes the server's body too
        assert any("retry 1/1" in r.getMessage() and "***" in r.getMessage() for r in caplog.records)
    for f in glob.glob(str(tmp_path / "cache" / "**"), recursive=True):
        if f.endswith(".json"):
            assert SECRET not in open(f).read()


def test_a_completion_quoting_the_key_is_redacted_and_cached_redacted(stub, key, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    cache = tmp_path / "cache"
    out = asyncio.run(_client(stub, "ok", cache_dir=str(cache)).achat(MSG + [{"role": "user", "content": SECRET}],
                                                                          max_tokens=2))
    assert _echoed(stub, "ok")
    assert out.text == "A (you sent Bearer ***)"
    files = glob.glob(str(cache / "*.json"))
    assert len(files) == 1 and "***" in open(files[0]).read()  # the cache file was written, prompt and answer
    assert SECRET not in open(files[0]).read() and SECRET not in files[0]
    hit = asyncio.run(_client(stub, "ok", cache_dir=str(cache)).achat(MSG + [{"role": "user", "content": SECRET}],
                                                                          max_tokens=2))
    assert hit.cached and hit.text == out.text
    assert not _leaks(caplog)


# ---- what wraps the client: RARE's remote scorer, the evals judges, evals.run -------------------------------------

@pytest.mark.parametrize("route", ["nonjson", "error4xx"])
def test_rare_remote_scorer_never_shows_the_key(stub, key, caplog, route):
    from rubric_jax.judge.remote import RemoteJudgeUnavailable
    from rubric_jax.rare.scoring import RemoteScorer
    from rubric_jax.rubrics import Criterion, Rubric

    caplog.set_level(logging.DEBUG)
    scorer = RemoteScorer.from_spec(f"openai:m@{stub.url}/{route}/v1", timeout_s=0.5, max_retries=0, backoff_s=0.01)
    rubric = Rubric(name="r", criteria=(Criterion(id="c1", name="Clear", check="Is it clear?"),))
    before = stub.hits(route)
    with pytest.raises(RemoteJudgeUnavailable) as e:
        scorer.score(["task"], [["answer one", "answer two"]], [rubric], seed=0)
    assert stub.hits(route) > before and _echoed(stub, route)
    assert "***" in str(e.value)
    assert not _leaks(caplog, e.value)


def test_evals_judges_never_show_the_key(stub, key, caplog, tmp_path):
    from evals.judges import OVERALL, RemoteJudge
    from evals.scorers import RemoteScorer

    caplog.set_level(logging.DEBUG)
    judge = RemoteJudge(f"openai:m@{stub.url}/nonjson/v1", str(tmp_path), timeout_s=0.5, max_retries=0)
    with pytest.raises(ChatError, match="not JSON") as e:
        judge.p_first("task", ["a", "b"], [(0, 1)], [OVERALL])
    assert _echoed(stub, "nonjson") and "***" in str(e.value)
    scorer = RemoteScorer(f"openai:m@{stub.url}/error4xx/v1", str(tmp_path), timeout_s=0.5)
    scorer.remote.client.max_retries = 0
    with pytest.raises(Exception) as e2:
        scorer.score("task", ["a"], [OVERALL])
    assert "***" in str(e2.value)
    assert not _leaks(caplog, e.value, e2.value)
    for f in glob.glob(str(tmp_path / "**" / "*.json"), recursive=True):
        assert SECRET not in open(f).read()


@pytest.mark.parametrize("route", ["nonjson", "error4xx", "error5xx"])
def test_evals_run_prints_no_key(stub, key, caplog, capsys, tmp_path, route):
    """evals.run's judge path in-process: the judge's test request meets the echoing server."""
    from evals.run import main

    caplog.set_level(logging.DEBUG)
    rc = main(["--suite=pairwise_elo", "--models=a=smollm2-135m-instruct,b=shuffled:smollm2-135m-instruct",
               f"--judge=openai:m@{stub.url}/{route}/v1", "--remote_timeout=0.5", "--remote_retries=0",
               f"--out={tmp_path / 'out'}", f"--cache_dir={tmp_path / 'cache'}", "--quiet"])
    out, err = capsys.readouterr()
    assert rc == 1 and _echoed(stub, route)
    assert "***" in err and f"openai:m@{stub.url}/{route}/v1" in err
    assert SECRET not in out and SECRET not in err
    assert not _leaks(caplog)
