"""The determinism probe: one request at a time, the gate's request shape, a salt per request
only in the salted pass, and distinct outputs counted on the whole generation."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time

from benchmarks.engine import determinism


class _Server:
    """A real HTTP server answering /v1/chat/completions; `answer(body)` picks the text."""

    def __init__(self, answer) -> None:
        self.bodies: list[dict] = []
        self.overlaps = 0
        inflight = [0]
        lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    inflight[0] += 1
                    outer.overlaps += inflight[0] > 1
                    outer.bodies.append(body)
                time.sleep(0.02)
                data = json.dumps({"choices": [{"message": {"content": answer(body)}}]}).encode()
                with lock:
                    inflight[0] -= 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def run(answer, runs=4):
    srv = _Server(answer)
    try:
        return srv, asyncio.run(determinism.probe(srv.url, "m", "Write a story.", runs=runs, max_tokens=64))
    finally:
        srv.server.shutdown()


def test_requests_go_one_at_a_time_in_the_gates_shape_salted_only_in_the_salted_pass():
    srv, out = run(lambda body: "same")
    assert srv.overlaps == 0 and len(srv.bodies) == 8
    assert all(b["temperature"] == 0.0 and b["seed"] == 0 and b["max_tokens"] == 64 and not b["ignore_eos"]
               and b["messages"] == [{"role": "user", "content": "Write a story."}] for b in srv.bodies)
    serial, salted = srv.bodies[:4], srv.bodies[4:]
    assert all("cache_salt" not in b for b in serial)
    assert len({b["cache_salt"] for b in salted}) == 4
    assert out == {m: {"unique": 1, "runs": 4, "first_differs_at": None} for m in determinism.MODES}


def test_a_cache_hit_that_decodes_differently_shows_in_serial_only():
    """The first serial request prefills; the later ones would hit the cache: a server whose cache
    hits part from fresh prefills gives 2 distinct serial outputs and 1 salted."""
    seen = []

    def answer(body):
        cached = "cache_salt" not in body and seen.count(None) > 0
        seen.append(body.get("cache_salt"))
        return "story-cached" if cached else "story-fresh"

    _, out = run(answer)
    assert out["serial"]["unique"] == 2 and out["serial"]["first_differs_at"] == len("story-")
    assert out["serial_salted"]["unique"] == 1
