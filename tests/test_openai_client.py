"""rubric_jax.openai_client.ChatClient: against the live model server (round trip, cache), and against tiny
local HTTP servers that misbehave (429 with Retry-After, 5xx, timeouts, 4xx, a server echoing the key)."""

import asyncio
import glob
import json
import os
import time

import httpx
import pytest

from rubric_jax.openai_client import ChatClient, ChatError, Completion
from serve_fixture import free_port, shared_server, thread_server

SECRET = "sk-test-SECRET-0123456789"
KEY_ENV = "RUBRIC_JAX_TEST_API_KEY"
MSG = [{"role": "user", "content": "Name a colour."}]


# ---- a tiny scripted HTTP server (uvicorn in a thread) -------------------------------------------------------------

OK_BODY = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "blue"}, "finish_reason": "stop",
                        "logprobs": {"content": [{"token": "blue", "logprob": -0.1, "bytes": None,
                                                  "top_logprobs": [{"token": "blue", "logprob": -0.1, "bytes": None},
                                                                   {"token": "red", "logprob": -2.5, "bytes": None}]}]}}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


@pytest.fixture(scope="module")
def scripted():
    """(base URL, hits per route, Authorization headers seen). Routes: /flaky (429 twice with Retry-After 1,
    then 503 once, then 200), /slow (sleeps 2 s), /bad (400), /echo (401 quoting the Authorization header)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    hits: dict[str, int] = {}
    auth: list = []

    @app.post("/{route}/v1/chat/completions")
    async def chat(route: str, request: Request):
        n = hits[route] = hits.get(route, 0) + 1
        auth.append(request.headers.get("authorization"))
        if route == "flaky":
            if n <= 2:
                return JSONResponse({"error": {"message": "rate limited"}}, 429, headers={"Retry-After": "1"})
            if n == 3:
                return JSONResponse({"error": {"message": "overloaded"}}, 503)
            return OK_BODY
        if route == "slow":
            await asyncio.sleep(2.0)
            return OK_BODY
        if route == "bad":
            return JSONResponse({"error": {"message": "'messages' is required", "type": "invalid_request_error"}},
                                400)
        if route == "echo":
            return JSONResponse({"error": {"message": f"Incorrect API key provided: {request.headers.get('authorization')}"}},
                                401)
        return OK_BODY

    with thread_server(app, what="scripted server") as port:
        yield f"http://127.0.0.1:{port}", hits, auth


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def test_from_spec_and_repr(key):
    c = ChatClient.from_spec("openai:gpt-4o-mini@https://api.openai.com/v1", api_key_env=KEY_ENV)
    assert (c.model, c.base_url) == ("gpt-4o-mini", "https://api.openai.com/v1")
    assert SECRET not in repr(c) and SECRET not in str(vars(c))
    for bad in ("gpt-4o-mini", "openai:gpt-4o-mini", "anthropic:x@http://h", "openai:@http://h"):
        with pytest.raises(ValueError, match="openai:MODEL@BASE_URL"):
            ChatClient.from_spec(bad)


@pytest.mark.slow
def test_retries_429_with_retry_after_then_5xx_then_succeeds(scripted, key):
    base, hits, auth = scripted
    c = ChatClient(f"{base}/flaky/v1", "m", api_key_env=KEY_ENV, backoff_s=0.05, max_retries=5)
    t0 = time.monotonic()
    out = asyncio.run(c.achat(MSG, max_tokens=4, top_logprobs=2))
    elapsed = time.monotonic() - t0
    assert out == Completion("blue", "stop", [{"blue": -0.1, "red": -2.5}], cached=False)
    assert hits["flaky"] == 4 and c.http_requests == 4
    assert 2.0 <= elapsed < 4.0  # two Retry-After: 1 waits (+ <=25% jitter), then one short backoff
    assert auth[-1] == f"Bearer {SECRET}"


def test_retries_run_out(scripted, key):
    base, hits, _ = scripted
    hits.pop("flaky", None)
    c = ChatClient(f"{base}/flaky/v1", "m", api_key_env=KEY_ENV, max_retries=1, backoff_s=0.01)
    with pytest.raises(ChatError, match="giving up after 2 attempts.*HTTP 429: rate limited") as e:
        asyncio.run(c.achat(MSG, max_tokens=4))
    assert e.value.attempts == 2 and hits["flaky"] == 2


def test_timeout_is_retried_then_fails(scripted, key):
    base, hits, _ = scripted
    c = ChatClient(f"{base}/slow/v1", "m", api_key_env=KEY_ENV, timeout_s=0.3, max_retries=2, backoff_s=0.01)
    t0 = time.monotonic()
    with pytest.raises(ChatError, match="timed out") as e:
        asyncio.run(c.achat(MSG, max_tokens=4))
    assert e.value.attempts == 3 and c.http_requests == 3
    assert time.monotonic() - t0 < 2.5  # three 0.3 s timeouts, never the server's 2 s
    assert SECRET not in str(e.value)


def test_connection_error_is_retried(key):
    c = ChatClient(f"http://127.0.0.1:{free_port()}/v1", "m", api_key_env=KEY_ENV, max_retries=2, backoff_s=0.01)
    with pytest.raises(ChatError, match="connection error") as e:
        asyncio.run(c.achat(MSG, max_tokens=4))
    assert e.value.attempts == 3 and SECRET not in str(e.value)


def test_4xx_raises_at_once_with_the_server_message(scripted, key):
    base, hits, _ = scripted
    c = ChatClient(f"{base}/bad/v1", "m", api_key_env=KEY_ENV, backoff_s=0.01)
    with pytest.raises(ChatError, match=r"HTTP 400: 'messages' is required") as e:
        asyncio.run(c.achat(MSG, max_tokens=4))
    assert e.value.status_code == 400 and hits["bad"] == 1


def test_key_is_redacted_from_errors(scripted, key):
    base, _, _ = scripted
    c = ChatClient(f"{base}/echo/v1", "m", api_key_env=KEY_ENV)
    with pytest.raises(ChatError, match="HTTP 401") as e:
        asyncio.run(c.achat(MSG, max_tokens=4))
    assert SECRET not in str(e.value) and SECRET not in repr(e.value) and "***" in str(e.value)


def test_no_key_sends_no_authorization(scripted, monkeypatch):
    base, _, auth = scripted
    monkeypatch.delenv(KEY_ENV, raising=False)
    out = asyncio.run(ChatClient(f"{base}/ok/v1", "m", api_key_env=KEY_ENV).achat(MSG, max_tokens=4))
    assert out.text == "blue" and auth[-1] is None


# ---- the live model server -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(tmp_path_factory):
    return shared_server(tmp_path_factory)


@pytest.mark.slow
def test_round_trip_and_cache(live, key, tmp_path):
    base, _, _ = live
    cache = str(tmp_path / "cache")
    reqs = [{"messages": [{"role": "user", "content": f"Say {w}."}], "max_tokens": 8, "temperature": 0.0, "seed": 3}
            for w in ("yes", "no", "maybe")]
    c = ChatClient(base, "tiny_qwen3", api_key_env=KEY_ENV, cache_dir=cache, concurrency=3)
    first = c.chat_many(reqs, desc="test")
    assert len(first) == 3 and all(o.text and not o.cached and o.finish_reason in ("stop", "length") for o in first)
    assert all(o.top_logprobs is None for o in first)
    # in order: each result is the one its own request gets alone
    alone = asyncio.run(ChatClient(base, "tiny_qwen3").achat(**reqs[2]))
    assert alone.text == first[2].text

    served = httpx.get(f"{base}/stats").json()["requests"]
    c2 = ChatClient(base, "tiny_qwen3", api_key_env=KEY_ENV, cache_dir=cache)
    second = c2.chat_many(reqs)
    assert [o.cached for o in second] == [True] * 3 and c2.http_requests == 0
    assert [(o.text, o.finish_reason, o.top_logprobs) for o in second] == \
        [(o.text, o.finish_reason, o.top_logprobs) for o in first]
    assert httpx.get(f"{base}/stats").json()["requests"] == served  # no request reached the server
    # a different setting is a miss
    assert not asyncio.run(c2.achat(**{**reqs[0], "seed": 4})).cached

    files = glob.glob(os.path.join(cache, "*"))
    assert len(files) == 4 and all(f.endswith(".json") for f in files)  # no temporary files left
    for f in files:
        text = open(f).read()
        assert SECRET not in text and "Bearer" not in text
        json.loads(text)


@pytest.mark.slow
def test_remote_judge_against_the_live_server(live, tmp_path):
    """evals' remote judge through this client against our own server: both orders asked, verdicts are
    probabilities, and a second judge on the same cache directory sends nothing to the server."""
    import httpx
    import numpy as np

    from evals.judges import OVERALL, RemoteJudge

    base, _, _ = live
    stats = lambda: httpx.get(f"{base}/stats", timeout=10).json()["requests"]  # noqa: E731
    before = stats()
    judge = RemoteJudge(f"openai:tiny_qwen3@{base}", str(tmp_path / "judge"))
    answers = ["The rain kept time on the tin roof all night.", "rain roof the night all time kept on tin The"]
    p = judge.p_first("Write one line about rain.", answers, [(0, 1), (1, 0)], [OVERALL])
    assert p.shape == (2, 1) and np.all((p >= 0) & (p <= 1))
    assert stats() - before == 2  # one request per order
    again = RemoteJudge(f"openai:tiny_qwen3@{base}", str(tmp_path / "judge"))
    np.testing.assert_array_equal(again.p_first("Write one line about rain.", answers, [(0, 1), (1, 0)], [OVERALL]), p)
    assert stats() - before == 2  # served from the caches: no new request


# ---- the remote judge through a faulty proxy in front of the live server -------------------------------------------

@pytest.fixture(scope="module")
def faulty(live):
    """A proxy to the live server that answers incoming requests from a script first: "429" (rate limited,
    Retry-After: 0), "hang" (2 min, then an unreadable verdict, unless the client hangs up first), then forwards. Yields (base URL, the script to fill, counts)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    base, _, _ = live
    app = FastAPI()
    script: list[str] = []
    counts = {"in": 0, "forwarded": 0, "abandoned": 0}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        counts["in"] += 1
        action = script.pop(0) if script else "forward"
        if action == "429":
            return JSONResponse({"error": {"message": "slow down"}}, 429, headers={"Retry-After": "0"})
        if action == "hang":  # a late answer would be a wrong one: only a client that gave up gets it right
            for _ in range(1200):
                await asyncio.sleep(0.1)
                if await request.is_disconnected():
                    counts["abandoned"] += 1
                    return JSONResponse({"error": {"message": "abandoned"}}, 504)
            return OK_BODY
        counts["forwarded"] += 1
        # no proxy-side limit: a slow upstream (a compile on a loaded machine) must not turn into a 5xx that the
        # client would retry, which would change what the tests count
        async with httpx.AsyncClient(timeout=None) as http:
            r = await http.post(f"{base}/chat/completions", content=await request.body(),
                                headers={"content-type": "application/json"})
        return JSONResponse(r.json(), r.status_code)

    with thread_server(app, what="proxy") as port:
        yield f"http://127.0.0.1:{port}/v1", script, counts


RAIN = ("Write one line about rain.",
        ["The rain kept time on the tin roof all night.", "rain roof the night all time kept on tin The"])


@pytest.mark.slow
def test_remote_judge_rides_out_429_and_a_timeout(live, faulty, tmp_path):
    """Through the proxy, the judge's requests meet two 429s and a hang longer than its timeout; it retries,
    hangs up on the hang, and ends with exactly the completions the server gives when asked directly."""
    import numpy as np

    from evals.judges import OVERALL, RemoteJudge

    base, _, _ = live
    proxy, script, counts = faulty
    pairs = [(0, 1), (1, 0)]
    # The server pads a batch to 1 or 2 rows here; through the proxy a forwarded request may come alone or beside
    # the other, so both programs are compiled before anything is timed: a compile on a loaded machine outlasts
    # the timeout below, and the client's retry would then send a sixth request.
    for i, warm in enumerate(([pairs[0]], pairs)):
        RemoteJudge(f"openai:tiny_qwen3@{base}", str(tmp_path / f"warm{i}")).p_first(*RAIN, warm, [OVERALL])
    t0 = time.monotonic()  # directly: the reference completions, and a warm round trip to size the timeout by
    direct = RemoteJudge(f"openai:tiny_qwen3@{base}", str(tmp_path / "direct")).p_first(*RAIN, pairs, [OVERALL])
    # generous for a loaded machine (two test workers, a server that batches), well below the 2 min hang
    timeout = min(60.0, max(10.0, 6 * (time.monotonic() - t0)))
    script[:] = ["429", "hang", "429"]
    counts.update({"in": 0, "forwarded": 0, "abandoned": 0})
    judge = RemoteJudge(f"openai:tiny_qwen3@{proxy}", str(tmp_path / "proxied"), timeout_s=timeout,
                        backoff_s=0.05, max_retries=3)
    p = judge.p_first(*RAIN, pairs, [OVERALL])
    time.sleep(0.3)  # the proxy notices the hang-up within 0.1 s
    assert counts == {"in": 5, "forwarded": 2, "abandoned": 1} and judge.client.http_requests == 5 and not script

    def completions(d):
        out = {}
        for f in glob.glob(str(tmp_path / d / "chat" / "*.json")):
            rec = json.load(open(f))
            out[json.dumps(rec["request"]["messages"])] = rec["completion"]
        return out

    want, got = completions("direct"), completions("proxied")
    assert len(want) == 2 and want.keys() == got.keys()
    for k in want:  # float32 logprobs may differ between the server's batch shapes, the tokens may not
        assert got[k]["text"] == want[k]["text"]
        for a, b in zip(got[k]["top_logprobs"], want[k]["top_logprobs"], strict=True):
            assert a.keys() == b.keys()
            np.testing.assert_allclose([a[t] for t in b], list(b.values()), atol=1e-5)
    np.testing.assert_allclose(p, direct, atol=1e-5)


@pytest.mark.slow
def test_remote_judge_gives_up_with_a_clear_error_and_resumes_from_its_cache(faulty, tmp_path):
    from evals.judges import OVERALL, RemoteJudge

    proxy, script, counts = faulty
    cache = str(tmp_path / "judge")
    script[:] = ["429"] * 50
    judge = RemoteJudge(f"openai:tiny_qwen3@{proxy}", cache, backoff_s=0.01, max_retries=1)
    with pytest.raises(ChatError, match=r"giving up after 2 attempts.*HTTP 429: slow down"):
        judge.p_first(*RAIN, [(0, 1), (1, 0)], [OVERALL])
    assert not glob.glob(os.path.join(cache, "**", "*.json"), recursive=True)  # nothing half-written was cached
    script.clear()
    # Counted at the client, not the proxy: the sibling request cancelled when the first gave up may still reach
    # a lagging proxy after this point and be forwarded there, which says nothing about this judge.
    # A generous timeout: on a loaded machine the server's first generation (a compile) can outlast the 60 s
    # default, and the client's retry would then send a third request.
    again = RemoteJudge(f"openai:tiny_qwen3@{proxy}", cache, timeout_s=600)
    p = again.p_first(*RAIN, [(0, 1), (1, 0)], [OVERALL])
    assert p.shape == (2, 1) and again.client.http_requests == 2  # both verdicts asked for, none from the cache
