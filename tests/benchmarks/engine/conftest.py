"""Fixtures of the engine harness tests: a recording HTTP server (the engine sources: tests/conftest.py)."""

from __future__ import annotations

import pytest


class RecordingServer:
    """A real HTTP server on a free port answering JSON POSTs with `answer(body)` after
    `delay(body)` seconds, recording each request as (body, start, end) in arrival order."""

    def __init__(self, answer, delay=lambda body: 0.02) -> None:
        import http.server
        import json
        import threading
        import time

        self.requests: list[dict] = []
        lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    record = {"body": body, "start": time.monotonic(), "end": None}
                    outer.requests.append(record)
                time.sleep(delay(body))
                data = json.dumps(answer(body)).encode()
                with lock:
                    record["end"] = time.monotonic()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def overlapping(self) -> int:
        """Requests that started before an earlier one ended."""
        ends = [r["end"] for r in self.requests]
        return sum(any(e is not None and r["start"] < e for e in ends[:i]) for i, r in enumerate(self.requests))


@pytest.fixture
def recording_server():
    """RecordingServer(answer, delay) factory; every server it made is shut down after the test."""
    made = []

    def make(answer, delay=lambda body: 0.02):
        made.append(RecordingServer(answer, delay))
        return made[-1]

    yield make
    for srv in made:
        srv.server.shutdown()
