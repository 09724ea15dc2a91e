"""OpenAI-compatible chat-completions server on our sampler (FastAPI + uvicorn).

    python -m rubric_jax.serve --model=<HF dir | .gguf | embedded name | training workdir> --port=8000 \
        [--host=127.0.0.1] [--max_batch=16] [--batch_wait_ms=20] [--served_model_name=NAME]

A training workdir (one holding `checkpoints/` and the run's `config.json`) serves its base model (config
`model`, default the embedded SmolLM2) with the latest LoRA checkpoint's adapters merged into the weights.

Endpoints:
- `GET /v1/models`: the one served model.
- `POST /v1/chat/completions`: `messages` (system / user / assistant, string content or text parts) go
  through the tokenizer's chat template; `max_tokens` (or `max_completion_tokens`), `temperature` (0 =
  greedy), `top_p`, `seed`, `n` (1 only), `logprobs` + `top_logprobs` (0..20), `stream` (SSE; the completion
  is generated whole, then sent as one chunk per token), and the extensions `top_k`, `min_p`. `usage`
  counts prompt tokens and generated tokens (the end-of-turn token included); `finish_reason` is "stop" when
  the model ended its turn, "length" when max_tokens cut it.
- `GET /v1/stats` (extension): requests served, batches run, rows per batch.

Batching: a background worker takes the first waiting request, collects more for up to `batch_wait_ms`
(at most `max_batch`), splits them by sampling settings (temperature, top_p, top_k, min_p), and samples each
group in one call: rows padded to a power of two, prompts left-padded to the sampler's bucketed length,
max_tokens rounded up to a power of two and each completion trimmed to its own max_tokens, so a stream of
requests compiles a handful of programs (prompt widths start at 64), not one per request. Each request's randomness comes only from its
own `seed` (fresh when absent), never from its batch-mates. One log line per batch: rows, tokens, seconds.

Top log-probabilities: the sampler records only each sampled token's log-probability, so when a batch asks
for logprobs one extra forward pass over prompt + completion gives the log-softmax of the model's logits
(temperature 1, unfiltered: what OpenAI reports) at every generated position; its top 20 are kept.

Start-up: the arguments are checked and the port is taken before the model loads, so a port in use or a
misspelled --model is one line on stderr (`error: ...`, exit status 2) in the first seconds, and "serving on"
is logged only once the server really listens. RUBRIC_JAX_TRACEBACK=1 adds the traceback (rubric_jax.errors).

Malformed requests (bad JSON, missing or mistyped fields, unknown roles, max_tokens <= 0, prompt + max_tokens
beyond the model's context) get HTTP 400 with an OpenAI-style `{"error": {"message", "type", "param",
"code"}}` body; the server keeps serving.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import errno
import functools
import json
import logging
import math
import os
import secrets
import socket
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from flax import nnx
from starlette.exceptions import HTTPException

from rubric_jax.errors import UserError, check_model_arg, reported
from rubric_jax.padding import pow2

log = logging.getLogger("rubric_jax.serve")

ROLES = ("system", "user", "assistant")
MAX_TOP_LOGPROBS = 20
DEFAULT_MAX_TOKENS = 256
MIN_PROMPT_WIDTH = 64  # short chat prompts share one prefill shape (16/32/64 would each compile)


# ---------------------------------------------------------------------------------------------------------------
# Loading

def load_for_serving(spec: str):
    from rubric_jax.models.loading import load_model
    from rubric_jax.models.tokenizer import load_tokenizer
    from rubric_jax.rl.workdir import is_workdir, load_trained

    if os.path.isdir(spec) and is_workdir(spec):
        model, tokenizer, step = load_trained(spec)
        log.info("serving %s at step %d (its trained weights)", spec, step)
        return model, tokenizer
    return load_model(spec), load_tokenizer(spec)


# ---------------------------------------------------------------------------------------------------------------
# Requests

class BadRequest(ValueError):
    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param, self.code = param, code


@dataclasses.dataclass
class ChatRequest:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int | None
    top_logprobs: int | None  # None: no logprobs; k >= 0: logprobs with k alternatives
    stream: bool
    include_usage: bool

    def group(self):
        return (self.temperature, self.top_p, self.top_k, self.min_p)


@dataclasses.dataclass
class Generated:
    tokens: list[int]  # trimmed to max_tokens, end-of-turn id included when reached
    finish_reason: str
    text_tokens: list[int]  # tokens without the final end-of-turn id
    logprobs: list[tuple[float, list[tuple[int, float]]]] | None  # per text token: (its logprob, top-k)


def _num(body, name, default, lo=None, hi=None, integer=False, lo_open=False):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise BadRequest(f"'{name}' must be {'an integer' if integer else 'a number'}, got {json.dumps(v)}", name)
    if not math.isfinite(v):  # Python's JSON reader accepts NaN and Infinity; no setting means anything with them
        raise BadRequest(f"'{name}' must be a finite number, got {v}", name)
    if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        rng = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}]"
        raise BadRequest(f"'{name}' must be in {rng}, got {v}", name)
    return v


def _content(m, i) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                                   for p in c):
        return "".join(p["text"] for p in c)
    raise BadRequest(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def parse_request(body: Any, tokenizer, context: int) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("'messages' is required: a non-empty list of {role, content} objects", "messages")
    messages = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object with 'role' and 'content'", f"messages[{i}]")
        if m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {list(ROLES)}, got {json.dumps(m.get('role'))}",
                             f"messages[{i}].role")
        messages.append({"role": m["role"], "content": _content(m, i)})
    n = _num(body, "n", 1, integer=True)
    if n != 1:
        raise BadRequest(f"only n=1 is supported, got n={n}", "n")
    for unsupported in ("stop", "tools", "functions", "response_format"):
        if body.get(unsupported) not in (None, [], ""):
            raise BadRequest(f"'{unsupported}' is not supported by this server", unsupported)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", "stream")
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, (bool, type(None))):
        raise BadRequest("'logprobs' must be a boolean", "logprobs")
    top_logprobs = _num(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS, integer=True)
    if top_logprobs and not logprobs:
        raise BadRequest("'top_logprobs' requires 'logprobs': true", "top_logprobs")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _num({"max_tokens": max_tokens}, "max_tokens", None, 1, integer=True)
    opts = body.get("stream_options") or {}
    try:
        prompt_ids = tokenizer.encode_chat(messages)
    except Exception as e:  # a template that rejects the conversation (e.g. role order)
        raise BadRequest(f"the chat template rejected these messages: {e}", "messages") from None
    room = context - len(prompt_ids)
    if max_tokens is None:
        max_tokens = min(DEFAULT_MAX_TOKENS, room)
    if max_tokens < 1 or len(prompt_ids) + max_tokens > context:
        raise BadRequest(f"this model's context is {context} tokens; the prompt has {len(prompt_ids)} tokens and "
                         f"max_tokens is {max_tokens}: reduce the prompt or max_tokens", "messages",
                         "context_length_exceeded")
    return ChatRequest(
        prompt_ids=prompt_ids, max_tokens=max_tokens, temperature=float(_num(body, "temperature", 1.0, 0, 2)),
        top_p=float(_num(body, "top_p", 1.0, 0, 1, lo_open=True)), top_k=int(_num(body, "top_k", 0, 0, integer=True)),
        min_p=float(_num(body, "min_p", 0.0, 0, 1)), seed=_num(body, "seed", None, integer=True),
        top_logprobs=top_logprobs if logprobs else None, stream=stream,
        include_usage=bool(isinstance(opts, dict) and opts.get("include_usage")))


# ---------------------------------------------------------------------------------------------------------------
# Generation

@functools.partial(jax.jit, static_argnames=("graphdef", "start", "k"))
def _top_logprobs_jit(graphdef, state, tokens_bt, mask_bt, *, start: int, k: int):
    """Log-softmax at the positions that predicted tokens[:, start:]: (top-k values, top-k ids, chosen)."""
    model = nnx.merge(graphdef, state)
    logits, _ = model(tokens_bt, mask_bt=mask_bt)
    logp = jax.nn.log_softmax(logits[:, start - 1:-1].astype(jnp.float32), axis=-1)
    top_v, top_i = jax.lax.top_k(logp, k)
    chosen = jnp.take_along_axis(logp, tokens_bt[:, start:, None], axis=-1)[..., 0]
    return top_v, top_i, chosen


class Engine:
    """The model and tokenizer; `generate` runs one batch of same-settings requests (in one thread)."""

    def __init__(self, model, tokenizer, max_batch: int):
        self.model, self.tok, self.max_batch = model, tokenizer, max_batch
        self.context = int(model.cfg.max_position_embeddings)
        self.graphdef, self.state = nnx.split(model)
        self.eos = set(tokenizer.eos_ids)
        self.stats = {"requests": 0, "batches": 0, "batch_rows": [], "max_batch_rows": 0, "generated_tokens": 0}

    def generate(self, reqs: list[ChatRequest]) -> list[Generated]:
        from rubric_jax.sampling.sampler import bucket_length, prompt_keys_for, sample

        t0 = time.perf_counter()
        r0 = reqs[0]
        rows = pow2(len(reqs))
        prompts = [r.prompt_ids for r in reqs] + [reqs[0].prompt_ids] * (rows - len(reqs))
        keys = [prompt_keys_for(r.seed if r.seed is not None else secrets.randbits(31), 1)[0] for r in reqs]
        keys += [keys[0]] * (rows - len(reqs))
        max_new = pow2(max(r.max_tokens for r in reqs))
        out = sample(self.model, prompts, max_new_tokens=max_new, temperature=r0.temperature, top_k=r0.top_k,
                     top_p=r0.top_p, min_p=r0.min_p, eos_ids=self.tok.eos_ids, pad_id=self.tok.pad_id,
                     prompt_keys=jnp.stack(keys), prompt_length=bucket_length(max(map(len, prompts)), MIN_PROMPT_WIDTH))
        results = []
        for i, r in enumerate(reqs):
            toks = out.tokens[i, :min(int(out.lengths[i]), r.max_tokens)].tolist()
            ended = bool(toks) and toks[-1] in self.eos
            results.append(Generated(toks, "stop" if ended else "length", toks[:-1] if ended else toks, None))
        if any(r.top_logprobs is not None for r in reqs):
            self._add_logprobs(out, results, reqs)
        gen = sum(len(g.tokens) for g in results)
        self.stats["batches"] += 1
        self.stats["requests"] += len(reqs)
        self.stats["generated_tokens"] += gen
        self.stats["batch_rows"] = (self.stats["batch_rows"] + [len(reqs)])[-1000:]
        self.stats["max_batch_rows"] = max(self.stats["max_batch_rows"], len(reqs))
        log.info("batch: %d rows (padded to %d), prompt width %d, max_new %d, %d tokens generated, %.2f s",
                 len(reqs), rows, out.prompt_tokens.shape[1], max_new, gen, time.perf_counter() - t0)
        return results

    def _add_logprobs(self, out, results: list[Generated], reqs: list[ChatRequest]):
        tp = out.prompt_tokens.shape[1]
        comp = np.where(out.completion_mask(), out.tokens, self.tok.pad_id).astype(np.int32)
        tokens = np.concatenate([out.prompt_tokens, comp], axis=1)
        mask = np.concatenate([out.prompt_mask, out.completion_mask()], axis=1)
        top_v, top_i, chosen = jax.device_get(_top_logprobs_jit(
            self.graphdef, self.state, jnp.asarray(tokens), jnp.asarray(mask), start=tp, k=MAX_TOP_LOGPROBS))
        for i, (g, r) in enumerate(zip(results, reqs)):
            if r.top_logprobs is None:
                continue
            k = r.top_logprobs
            g.logprobs = [(float(chosen[i, t]), [(int(top_i[i, t, j]), float(top_v[i, t, j])) for j in range(k)])
                          for t in range(len(g.text_tokens))]


@dataclasses.dataclass
class _Pending:
    req: ChatRequest
    future: asyncio.Future


class Batcher:
    """Collects requests for up to `wait_s` (at most max_batch), groups them by settings, runs each group."""

    def __init__(self, engine: Engine, max_batch: int, wait_s: float):
        self.engine, self.max_batch, self.wait_s = engine, max_batch, wait_s
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sampler")
        self.task: asyncio.Task | None = None

    def start(self):
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, req: ChatRequest) -> Generated:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(req, fut))
        return await fut

    async def _run(self):
        loop = asyncio.get_running_loop()
        while True:
            pending = [await self.queue.get()]
            deadline = loop.time() + self.wait_s
            while len(pending) < self.max_batch:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    pending.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
            groups: dict[Any, list[_Pending]] = {}
            for p in pending:
                if not p.future.cancelled():
                    groups.setdefault(p.req.group(), []).append(p)
            for group in groups.values():
                try:
                    results = await loop.run_in_executor(self.executor, self.engine.generate, [p.req for p in group])
                except Exception as e:  # a failed batch fails its requests, not the server
                    log.exception("batch of %d failed", len(group))
                    for p in group:
                        if not p.future.done():
                            p.future.set_exception(e)
                    continue
                for p, r in zip(group, results):
                    if not p.future.done():
                        p.future.set_result(r)


# ---------------------------------------------------------------------------------------------------------------
# HTTP

def _error(status: int, message: str, param=None, code=None, type_="invalid_request_error"):
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}}, status)


def create_app(engine: Engine, model_id: str, *, max_batch: int = 16, batch_wait_ms: float = 20.0):
    batcher = Batcher(engine, max_batch, batch_wait_ms / 1000.0)

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        batcher.task.cancel()
        batcher.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="rubric_jax OpenAI-compatible server", lifespan=lifespan)
    created = int(time.time())
    tok = engine.tok

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        return _error(exc.status_code, str(exc.detail), type_="invalid_request_error" if exc.status_code < 500
                      else "server_error")

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        return _error(400, f"invalid request: {exc.errors()}")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created,
                                            "owned_by": "rubric_jax"}]}

    @app.get("/v1/stats")
    async def stats():
        s = dict(engine.stats)
        s["batch_rows"] = list(s["batch_rows"])
        return s

    def token_entry(tid: int, lp: float) -> dict:
        s = tok.decode([tid], skip_special_tokens=False)
        return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return _error(400, f"the request body is not valid JSON: {e}")
        try:
            req = parse_request(body, tok, engine.context)
        except BadRequest as e:
            return _error(400, str(e), e.param, e.code)
        try:
            gen = await batcher.submit(req)
        except Exception as e:
            return _error(500, f"generation failed: {type(e).__name__}: {e}", type_="server_error")
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        text = tok.decode(gen.text_tokens)
        usage = {"prompt_tokens": len(req.prompt_ids), "completion_tokens": len(gen.tokens),
                 "total_tokens": len(req.prompt_ids) + len(gen.tokens)}
        logprobs = None
        if gen.logprobs is not None:
            logprobs = {"content": [dict(token_entry(t, lp), top_logprobs=[token_entry(a, alp) for a, alp in top])
                                    for t, (lp, top) in zip(gen.text_tokens, gen.logprobs)], "refusal": None}
        if not req.stream:
            return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model_id,
                    "system_fingerprint": None,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "logprobs": logprobs, "finish_reason": gen.finish_reason}],
                    "usage": usage}

        def chunk(delta, finish=None, lp=None, **extra):
            c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_id,
                 "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}], **extra}
            return f"data: {json.dumps(c)}\n\n"

        async def events():
            yield chunk({"role": "assistant", "content": ""})
            sent = ""
            for i in range(len(gen.text_tokens)):
                now = tok.decode(gen.text_tokens[:i + 1])
                if now.endswith("\ufffd") and i + 1 < len(gen.text_tokens):
                    continue  # an incomplete UTF-8 character: wait for the next token
                lp = None if logprobs is None else {"content": logprobs["content"][i:i + 1]}
                yield chunk({"content": now[len(sent):]}, lp=lp)
                sent = now
            yield chunk({}, gen.finish_reason)
            if req.include_usage:
                c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_id,
                     "choices": [], "usage": usage}
                yield f"data: {json.dumps(c)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or UserError naming host:port. Taken before the model loads: a port in
    use is found in the first second instead of after the load, and a client that connects while the model
    loads waits in the backlog instead of being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        raise UserError(f"--host={host}: cannot open a socket for it ({e.strerror or e})") from None
    # as uvicorn does: a restarted server may reuse the port while old connections sit in TIME_WAIT
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's backlog; listening now also keeps a second SO_REUSEADDR bind off the port
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            why = "address already in use (another server is listening there; stop it or give another --port)"
        else:
            why = e.strerror or str(e)
        raise UserError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rubric_jax.serve", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="HF checkpoint dir, .gguf file, embedded name, or a training workdir")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 = any free port (logged)")
    ap.add_argument("--max_batch", type=int, default=16)
    ap.add_argument("--batch_wait_ms", type=float, default=20.0)
    ap.add_argument("--served_model_name", default=None, help="the id /v1/models reports (default: from --model)")
    args = ap.parse_args(argv)
    with reported():
        _serve(args)


def check_args(args) -> None:
    """Raises UserError naming the first argument the server cannot run with (before the port or the model)."""
    if args.max_batch < 1:
        raise UserError(f"--max_batch={args.max_batch}: must be >= 1")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port={args.port}: must be in [0, 65535] (0 = any free port)")
    if not (math.isfinite(args.batch_wait_ms) and args.batch_wait_ms >= 0):
        raise UserError(f"--batch_wait_ms={args.batch_wait_ms}: must be a number >= 0")
    check_model_arg("--model", args.model)


def _serve(args):
    check_args(args)
    sock = listen(args.host, args.port)
    port = sock.getsockname()[1]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    t0 = time.perf_counter()
    try:
        model, tokenizer = load_for_serving(args.model)
    except BaseException:
        sock.close()
        raise
    engine = Engine(model, tokenizer, args.max_batch)
    model_id = args.served_model_name or os.path.basename(os.path.normpath(args.model))
    log.info("model %s loaded in %.1f s (context %d); serving on http://%s:%d/v1", model_id,
             time.perf_counter() - t0, engine.context, args.host, port)
    app = create_app(engine, model_id, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms)
    uvicorn.Server(uvicorn.Config(app, host=args.host, port=port, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
