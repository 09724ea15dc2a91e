"""A tiny OpenAI-compatible chat stub (http.server in a daemon thread) for test_secrets.py and
test_evals_failfast.py: no uvicorn, no model, ready in milliseconds.

`chat_stub()` yields a `Stub` whose base URL takes a route before /v1, e.g. f"{stub.url}/nonjson/v1". Every
route echoes the request's Authorization header in its body and in an X-Echo-Authorization response header,
the worst a misconfigured proxy does, and `stub.sent` keeps every (route, body) it sent, so a test can show
that the key really reached the client before asserting that the client never repeats it.

Routes: ok (a completion whose text quotes the header), nonjson (200, HTML), error4xx (401, OpenAI-style JSON
error), error5xx (502, HTML), malformed (200, JSON without choices), slow (sleeps `slow_s`, then as ok).
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import threading
import time


@dataclasses.dataclass
class Stub:
    url: str
    sent: list = dataclasses.field(default_factory=list)  # (route, body text) per response
    slow_s: float = 0.6

    def hits(self, route: str) -> int:
        return sum(r == route for r, _ in self.sent)


def completion(text: str) -> dict:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


def _response(route: str, auth: str) -> tuple[int, str, str]:
    """(status, content type, body) of a route."""
    if route in ("ok", "slow"):
        return 200, "application/json", json.dumps(completion(f"A (you sent {auth})"))
    if route == "nonjson":
        return 200, "text/html", f"<html><body>gateway debug: Authorization: {auth}</body></html>"
    if route == "error4xx":
        return 401, "application/json", json.dumps(
            {"error": {"message": f"Incorrect API key provided: {auth}", "type": "invalid_request_error"}})
    if route == "error5xx":
        return 502, "text/html", f"<html><h1>502 Bad Gateway</h1><pre>upstream refused {auth}</pre></html>"
    if route == "malformed":
        return 200, "application/json", json.dumps({"choices": [], "echo": auth})
    return 404, "text/plain", f"no route {route!r}"


@contextlib.contextmanager
def chat_stub(slow_s: float = 0.6):
    stub = Stub(url="", slow_s=slow_s)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            route = self.path.strip("/").split("/")[0]
            auth = self.headers.get("Authorization") or ""
            status, ctype, body = _response(route, auth)
            stub.sent.append((route, body))
            if route == "slow":
                time.sleep(stub.slow_s)
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Echo-Authorization", auth)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client timed out and closed the connection
                pass

        def log_message(self, *args):  # keep the test output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.handle_error = lambda *a: None  # a client that hung up mid-answer is expected here
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
