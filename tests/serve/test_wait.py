"""wait_ready against a real local HTTP server whose answers change over time."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from builder.errors import ServeError
from builder.serve.wait import wait_ready


class _Server:
    """/health and /v1/models answer from mutable fields, like a server that is loading."""

    def __init__(self):
        self.health = 200
        self.models: list[str] = []
        self.hits = 0
        self.key: str | None = None  # like vLLM's --api-key: /v1 needs "Bearer <key>", /health does not
        self.seen_auth: list[str | None] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits += 1
                if self.path == "/health":
                    self.send_response(outer.health)
                    self.end_headers()
                    return
                outer.seen_auth.append(self.headers.get("Authorization"))
                if outer.key is not None and self.headers.get("Authorization") != f"Bearer {outer.key}":
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"data": [{"id": m, "max_model_len": 2048} for m in outer.models]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()


def test_ready_only_once_the_served_name_is_listed(server):
    server.models = ["other-model"]
    threading.Timer(1.0, lambda: setattr(server, "models", ["other-model", "smol"])).start()
    ready = wait_ready(url=server.url, served_name="smol", timeout_s=20, poll_s=0.2)
    assert ready.served_name == "smol"
    assert ready.max_model_len == 2048
    assert ready.seconds >= 0.9
    assert server.hits > 2


def test_healthy_but_wrong_model_times_out_saying_what_it_saw(server):
    server.models = ["other-model"]
    with pytest.raises(ServeError) as err:
        wait_ready(url=server.url, served_name="smol", timeout_s=1.5, poll_s=0.2)
    assert "lists other-model, not smol" in err.value.message


def test_503_after_a_while_fails_at_once(server):
    server.health = 500  # starting up: not 200, keep waiting
    threading.Timer(0.8, lambda: setattr(server, "health", 503)).start()
    with pytest.raises(ServeError) as err:
        wait_ready(url=server.url, served_name="smol", timeout_s=30, poll_s=0.2)
    assert "503" in err.value.message


def test_alive_check_runs_every_poll_and_its_error_ends_the_wait(server):
    calls = []

    def alive():
        calls.append(1)
        if len(calls) == 3:
            raise ServeError("container stopped: exit code 1")

    with pytest.raises(ServeError, match="exit code 1"):
        wait_ready(url=server.url, served_name="smol", timeout_s=30, alive=alive, poll_s=0.1)
    assert len(calls) == 3


def test_cli_wait_exits_with_serve_error_code_on_timeout(free_port):
    proc = subprocess.run(
        [sys.executable, "-m", "builder", "wait", "--url", f"http://127.0.0.1:{free_port}", "--served-name", "smol",
         "--timeout", "2"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 40
    assert "not ready after 2 s" in proc.stderr and "port closed" in proc.stderr


def test_cli_wait_needs_a_name(free_port):
    proc = subprocess.run(
        [sys.executable, "-m", "builder", "wait", "--url", f"http://127.0.0.1:{free_port}"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 40
    assert "--served-name" in proc.stderr


def test_401_without_a_key_fails_at_once_saying_to_set_vllm_api_key(server, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    server.key, server.models = "s3cret", ["smol"]
    start = time.monotonic()
    with pytest.raises(ServeError) as err:
        wait_ready(url=server.url, served_name="smol", timeout_s=60, poll_s=0.2)
    assert time.monotonic() - start < 5  # not 45 minutes of "still loading"
    assert "401" in err.value.message and "requires an API key" in err.value.message
    assert "VLLM_API_KEY" in err.value.hint


def test_a_wrong_key_fails_at_once_and_the_right_one_is_sent_as_bearer(server, monkeypatch):
    server.key, server.models = "s3cret", ["smol"]
    monkeypatch.setenv("VLLM_API_KEY", "wrong")
    with pytest.raises(ServeError) as err:
        wait_ready(url=server.url, served_name="smol", timeout_s=60, poll_s=0.2)
    assert "rejected the key in VLLM_API_KEY" in err.value.message
    assert "wrong" not in str(err.value)  # the key itself is never printed
    monkeypatch.setenv("VLLM_API_KEY", "s3cret")
    assert wait_ready(url=server.url, served_name="smol", timeout_s=10, poll_s=0.2).served_name == "smol"
    assert server.seen_auth[-1] == "Bearer s3cret"


def test_no_key_sends_no_authorization_header(server, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    server.models = ["smol"]
    wait_ready(url=server.url, served_name="smol", timeout_s=10, poll_s=0.2)
    assert server.seen_auth == [None]
