"""The project's one OpenAI-compatible chat-completions client (async, httpx).

Used by everything that talks to a chat model over HTTP (evaluation harnesses, the RARE criterion
writer): OpenAI itself, vLLM / llama.cpp servers, or our own `python -m rubric_jax.serve`.

    client = ChatClient.from_spec("openai:gpt-4o-mini@https://api.openai.com/v1", cache_dir="/tmp/cache")
    outs = client.chat_many([{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}] * 10)
    outs[0].text, outs[0].finish_reason, outs[0].cached

- **Concurrency**: `chat_many` runs its requests concurrently on one connection pool, at most
  `concurrency` in flight (an asyncio semaphore), returns the results in the order given, and shows a tqdm
  progress bar with an ETA. `achat` is the single-request coroutine (its own semaphore per event loop).
- **Retries**: HTTP 429, 5xx, timeouts and connection errors are retried up to `max_retries` times with
  exponential backoff `backoff_s * 2**attempt` plus up to 25% random jitter; a `Retry-After` header (seconds
  or an HTTP date) replaces the computed delay (capped at 120 s). Any other 4xx raises `ChatError` at once
  with the status and the server's own error message. When retries run out, `ChatError` says why.
- **API key**: read at each request from the environment variable named by `api_key_env` (default
  OPENAI_API_KEY) and sent only as the `Authorization: Bearer` header; absent is fine (local servers). It is
  never stored on the client, and the client's repr names only the variable. Everything that can carry a
  request or a response goes through `redact` first: every `ChatError` (server bodies, JSON or not, echoed
  headers, malformed completions), every log line of this module and of httpx/httpcore (whose debug lines
  hold response headers), the completion text returned and every string of a cache file. `redact` replaces
  the key itself (also JSON-, repr- and URL-escaped) and any `Bearer <token>` with `***`, before any text is
  cut short, so no prefix of the key survives either.
- **Cache** (`cache_dir`): one JSON file per request, named by the sha256 of (base_url, model, messages,
  max_tokens, temperature, seed, top_logprobs) — never the key. A hit returns the stored completion with
  `cached=True` and makes no HTTP request. Files are written atomically (temporary file + rename), so
  concurrent writers and interrupted runs never leave a torn file; an unreadable file counts as a miss.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import hashlib
import json
import logging
import os
import random
import re
import tempfile
import threading
import time
import urllib.parse
import weakref
from typing import Any, Iterable

import httpx

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})  # 408/409: OpenAI documents them as retryable
MAX_RETRY_AFTER_S = 120.0
REDACTED = "***"

# A bearer token as an echoed header shows it. It must hold a digit: API keys and JWTs always do, while
# prose ("the Bearer shrugged") does not, so a judge's or writer's text is not mangled by the pattern.
_BEARER = re.compile(r"\b(Bearer\s+)(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}=*")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with each secret and every `Bearer <token>` replaced by "***".

    A secret is also found JSON-escaped, repr-escaped and URL-encoded, the forms in which a server body or a
    formatted message can carry it. Redact before cutting a text short: a cut can leave a prefix of the key
    that no later redaction recognises. Empty and None secrets are skipped (no key set).
    """
    text = str(text)
    forms: set[str] = set()
    for s in secrets:
        if s:
            forms.update({s, json.dumps(s)[1:-1], repr(s)[1:-1], urllib.parse.quote(s, safe=""),
                          urllib.parse.quote_plus(s)})
    # longest first: a form that contains another must go before it, or half of it would survive
    for f in sorted(forms, key=len, reverse=True):
        text = text.replace(f, REDACTED)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def _redact_tree(obj, secrets: list[str | None]):
    """A JSON-like value with every string in it redacted (for cache records)."""
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, dict):
        return {redact(k, secrets): _redact_tree(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_redact_tree(v, secrets) for v in obj]
    return obj


# Names (never values) of the environment variables clients read keys from; the log filter below reads the
# keys from there when a record is logged, so no key is held anywhere but the environment.
_KEY_ENVS: set[str] = {"OPENAI_API_KEY"}


def _env_keys() -> list[str | None]:
    return [os.environ.get(name) for name in sorted(_KEY_ENVS)]


class _RedactingFilter(logging.Filter):
    """Redacts a record's final message: httpcore logs response headers at debug level, and a server that
    echoes the Authorization header would put the key there."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error report
            return True
        clean = redact(message, _env_keys())
        if clean != message:
            record.msg, record.args = clean, None
        return True


# Logger filters only see records created on that very logger (not its children), so each is named.
for _name in (__name__, "httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy",
              "httpcore.socks"):
    logging.getLogger(_name).addFilter(_RedactingFilter())


@dataclasses.dataclass
class Completion:
    text: str
    finish_reason: str | None
    top_logprobs: list[dict[str, float]] | None  # per generated token: {token string: logprob} (when requested)
    cached: bool = False


class ChatError(RuntimeError):
    """A request failed for good: a non-retryable 4xx, a response that is not a completion, or retries
    exhausted. Its message has been through `redact`, so it never contains the API key."""

    def __init__(self, message: str, status_code: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status_code = status_code
        self.attempts = attempts


def _retry_after(headers) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        secs = float(value)
    except ValueError:
        try:
            secs = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(secs, 0.0), MAX_RETRY_AFTER_S)


def _server_message(resp: httpx.Response) -> str:
    """The server's own error message, whole: the caller redacts it before cutting it short."""
    try:
        body = resp.json()
        err = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)
        return str(err)
    except ValueError:
        return resp.text


def parse_completion(body: dict, secrets: Iterable[str | None] = ()) -> Completion:
    """The completion in a chat-completions response body; `ChatError` (quoting the body, redacted of
    `secrets`) when it is not one."""
    try:
        choice = body["choices"][0]
        msg = choice.get("message") or {}
        top = None
        lp = choice.get("logprobs")
        if lp and lp.get("content") is not None:
            top = [{t["token"]: float(t["logprob"]) for t in (c.get("top_logprobs") or [])} for c in lp["content"]]
        return Completion(text=msg.get("content") or "", finish_reason=choice.get("finish_reason"),
                          top_logprobs=top)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        # `from None`: the original exception's text can quote a field of the body, key included
        raise ChatError(f"malformed chat completion response ({type(e).__name__}): "
                        f"{redact(str(body), secrets)[:300]}") from None


class ChatClient:
    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8,
                 max_retries: int = 5, timeout_s: float = 60.0, backoff_s: float = 1.0, cache_dir: str | None = None):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        _KEY_ENVS.add(api_key_env)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.cache_dir = cache_dir
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
        self._semaphores: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = \
            weakref.WeakKeyDictionary()
        self._http: httpx.AsyncClient | None = None  # set while chat_many runs (one pool for all its requests)
        self.http_requests = 0  # HTTP attempts made (retries included), for tests and logs

    @classmethod
    def from_spec(cls, spec: str, **kw) -> "ChatClient":
        """"openai:MODEL@BASE_URL", e.g. "openai:gpt-4o-mini@https://api.openai.com/v1"."""
        provider, sep, rest = spec.partition(":")
        model, at, base_url = rest.partition("@")
        if provider != "openai" or not sep or not at or not model or not base_url:
            raise ValueError(f"chat client spec must look like 'openai:MODEL@BASE_URL', got {spec!r}")
        return cls(base_url, model, **kw)

    def __repr__(self) -> str:
        return (f"ChatClient(base_url={self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r}, "
                f"concurrency={self.concurrency}, cache_dir={self.cache_dir!r})")

    # ---- cache ---------------------------------------------------------------------------------------------------
    def cache_key(self, messages, max_tokens, temperature, seed, top_logprobs) -> str:
        blob = json.dumps([self.base_url, self.model, messages, max_tokens, temperature, seed, top_logprobs],
                          sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def _cache_path(self, key: str) -> str:
        return os.path.join(self.cache_dir, f"{key}.json")

    def _cache_get(self, key: str) -> Completion | None:
        if not self.cache_dir:
            return None
        try:
            with open(self._cache_path(key)) as f:
                d = json.load(f)["completion"]
            return Completion(text=d["text"], finish_reason=d["finish_reason"], top_logprobs=d["top_logprobs"],
                              cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _cache_put(self, key: str, request: dict, completion: Completion) -> None:
        if not self.cache_dir:
            return
        # The request is stored for people reading the cache (the key file name is its hash, taken before
        # this); a prompt or base_url may quote the key, so every string in the record is redacted.
        record = _redact_tree({"request": request, "completion": dataclasses.asdict(completion) | {"cached": False}},
                              [os.environ.get(self.api_key_env)])
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=f".{key[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f, ensure_ascii=False)
            os.replace(tmp, self._cache_path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    # ---- requests ------------------------------------------------------------------------------------------------
    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores[loop] = asyncio.Semaphore(self.concurrency)
        return sem

    def redact(self, text: str) -> str:
        """`text` without this client's API key (read from the environment now) or any bearer token."""
        return redact(text, [os.environ.get(self.api_key_env)])

    async def achat(self, messages: list[dict], *, max_tokens: int, temperature: float = 0.0, seed: int | None = None,
                    top_logprobs: int = 0) -> Completion:
        key = self.cache_key(messages, max_tokens, temperature, seed, top_logprobs)
        hit = self._cache_get(key)
        if hit is not None:
            return hit
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = top_logprobs
        async with self._semaphore():
            if self._http is not None:
                completion = await self._post(self._http, body)
            else:
                async with httpx.AsyncClient(timeout=self.timeout_s) as http:
                    completion = await self._post(http, body)
        self._cache_put(key, {k: v for k, v in body.items()} | {"base_url": self.base_url}, completion)
        return completion

    async def _post(self, http: httpx.AsyncClient, body: dict) -> Completion:
        url = f"{self.base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        api_key = os.environ.get(self.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            self.http_requests += 1
            try:
                resp = await http.post(url, json=body, headers=headers, timeout=self.timeout_s)
            except httpx.TimeoutException as e:
                last = f"timed out after {self.timeout_s:g} s ({type(e).__name__})"
            except (httpx.TransportError, OSError) as e:
                last = f"connection error ({type(e).__name__}: {e})"
            else:
                if resp.status_code < 300:
                    try:
                        data = resp.json()
                    except ValueError:
                        raise ChatError(f"{url} (model {self.model!r}): HTTP {resp.status_code} but the response "
                                        f"is not JSON: {self.redact(resp.text)[:300]!r}",
                                        resp.status_code, attempt + 1) from None
                    try:
                        completion = parse_completion(data, [api_key])
                    except ChatError as e:
                        raise ChatError(f"{url} (model {self.model!r}): {e}", resp.status_code,
                                        attempt + 1) from None
                    # a server that echoes the request into its answer would hand the key to the caller
                    # and to the cache
                    completion.text = self.redact(completion.text)
                    return completion
                message = self.redact(_server_message(resp))[:500]
                if resp.status_code not in RETRY_STATUS and resp.status_code < 500:
                    raise ChatError(f"{url} (model {self.model!r}): HTTP {resp.status_code}: {message}",
                                    resp.status_code, attempt + 1)
                last = f"HTTP {resp.status_code}: {message}"
                retry_after = _retry_after(resp.headers)
            if attempt == self.max_retries:
                break
            delay = retry_after if retry_after is not None else self.backoff_s * 2 ** attempt
            delay += random.uniform(0, 0.25 * delay)
            log.warning("%s: %s; retry %d/%d in %.2f s", url, self.redact(last), attempt + 1, self.max_retries, delay)
            await asyncio.sleep(delay)
        raise ChatError(f"{url} (model {self.model!r}): giving up after {self.max_retries + 1} attempts; last: "
                        f"{self.redact(last)}", None, self.max_retries + 1)

    async def _run_many(self, requests: list[dict], desc: str) -> list[Completion]:
        from tqdm.auto import tqdm

        results: list[Completion | None] = [None] * len(requests)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits) as http:
            self._http = http
            try:
                with tqdm(total=len(requests), desc=desc, unit="req", disable=None) as bar:
                    async def one(i, kw):
                        results[i] = await self.achat(**kw)
                        bar.update(1)

                    tasks = [asyncio.ensure_future(one(i, kw)) for i, kw in enumerate(requests)]
                    try:
                        await asyncio.gather(*tasks)
                    except BaseException:
                        for t in tasks:
                            t.cancel()
                        raise
            finally:
                self._http = None
        return results  # type: ignore[return-value]

    def chat_many(self, requests: list[dict], *, desc: str = "chat") -> list[Completion]:
        """Runs every request (a dict of `achat` keyword arguments) concurrently; results in request order."""
        return run_sync(lambda: self._run_many(requests, desc))


def run_sync(coro_fn):
    """asyncio.run(coro_fn()), also when called from inside a running event loop (a notebook): then on a
    fresh loop in a thread, whose exception is re-raised here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    out: dict[str, Any] = {}

    def target():
        try:
            out["r"] = asyncio.run(coro_fn())
        except BaseException as e:  # re-raised in the caller's thread
            out["e"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["r"]


__all__ = ["ChatClient", "ChatError", "Completion", "parse_completion", "redact", "run_sync"]


TEST_MAX_RETRIES = 2  # a test request may wait out a 429 or a restarting server, not a run's retry budget


def test_request(spec: str, *, timeout_s: float = 60.0, max_retries: int = TEST_MAX_RETRIES,
                 backoff_s: float = 1.0) -> None:
    """One chat request of one token ("Reply with A.") to the "openai:MODEL@BASE_URL" endpoint, without the
    cache (a cached answer would hide a dead endpoint): raises ChatError (redacted) when the endpoint, model
    name or key is wrong, in seconds rather than after a model has loaded. A malformed spec is a ValueError."""
    client = ChatClient.from_spec(spec, timeout_s=timeout_s, max_retries=min(max_retries, TEST_MAX_RETRIES),
                                  backoff_s=backoff_s, concurrency=1)
    try:
        run_sync(lambda: client.achat([{"role": "user", "content": "Reply with A."}], max_tokens=1,
                                      temperature=0.0))
    except ChatError as e:  # already redacted; again in case it was built elsewhere
        raise ChatError(client.redact(str(e))) from None
