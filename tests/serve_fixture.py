"""Starts `python -m rubric_jax.serve` on a tiny random checkpoint as a subprocess, for test_serve.py and
test_openai_client.py. `shared_server` starts one per pytest process (the first module fixture that asks
starts it; it stops when the process exits), so the two modules pay the start-up and compilations once."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import time

import httpx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_process(tmp_dir: str, *, max_batch: int = 8, batch_wait_ms: int = 300, extra_env: dict | None = None):
    """Yields (base_url ending in /v1, path of the server's log file, Popen)."""
    from conftest import write_tiny_checkpoint

    ckpt = os.path.join(tmp_dir, "tiny_qwen3")
    os.makedirs(ckpt, exist_ok=True)
    write_tiny_checkpoint(ckpt, "qwen3", tied=True, seed=0)
    port = free_port()
    log_path = os.path.join(tmp_dir, "server.log")
    env = dict(os.environ, JAX_PLATFORMS="cpu", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), **(extra_env or {}))
    # compiled programs come from the test session's shared cache (JAX_COMPILATION_CACHE_DIR, conftest.py)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rubric_jax.serve", f"--model={ckpt}", f"--port={port}",
                                 f"--max_batch={max_batch}", f"--batch_wait_ms={batch_wait_ms}"],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{open(log_path).read()[-3000:]}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {READY_TIMEOUT_S} s:\n{open(log_path).read()[-3000:]}")
            time.sleep(0.5)
        yield base, log_path, proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def thread_server(app, *, what: str = "server"):
    """Runs an ASGI app (e.g. a scripted FastAPI app) with uvicorn in a daemon thread; yields its port."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           timeout_graceful_shutdown=1))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not start")
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        t.join(10)


_SHARED: dict = {}


def shared_server(tmp_path_factory):
    """(base_url, log path, Popen) of this process' one test server."""
    if "server" not in _SHARED or _SHARED["server"][2].poll() is not None:
        cm = serve_process(str(tmp_path_factory.mktemp("serve")))
        _SHARED["server"] = cm.__enter__()
        atexit.register(cm.__exit__, None, None, None)
    return _SHARED["server"]
