"""wait_ready against a real local HTTP server whose answers change over time."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builder.constants import REPO_ROOT
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


class _RawServer:
    """A local server whose answer to each path is raw bytes written by a function: slow, silent,
    trickling or malformed on purpose. `stop` ends every handler still sending."""

    def __init__(self, routes):
        self.routes = routes
        self.closing = threading.Event()
        self.asked = threading.Event()  # set once a request has arrived
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                outer.asked.set()
                outer.routes.get(self.path, _send(404, b""))(self, outer.closing)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _send(status, body, headers=()):
    def answer(h, closing):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return answer


def _trickle(h, closing):
    """Headers at once, then one body byte every 2 s, for ever."""
    h.send_response(200)
    h.send_header("content-length", "1000")
    h.end_headers()
    h.wfile.flush()
    while not closing.wait(2.0):
        h.wfile.write(b"x")
        h.wfile.flush()


def _trickle_headers(h, closing):
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 1000:
        if closing.wait(1.0):
            return
        h.wfile.write(bytes([byte]))
        h.wfile.flush()


def _silent(h, closing):
    closing.wait(600)


def _slow(h, closing):
    if not closing.wait(4.0):
        _send(200, b"")(h, closing)


def _models(body: bytes):
    return _send(200, body, [("content-type", "application/json")])


HEALTHY = _send(200, b"")


@pytest.fixture
def raw():
    servers = []

    def start(routes):
        servers.append(_RawServer(routes))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "routes",
    [
        {"/health": _trickle},
        {"/health": HEALTHY, "/v1/models": _trickle},
        {"/health": _trickle_headers},
        {"/health": _silent},
        {"/health": _slow},
    ],
    ids=["trickled-health-body", "trickled-models-body", "trickled-headers", "silent", "slow"],
)
def test_the_timeout_is_a_deadline_whatever_the_server_does(raw, routes):
    """The issue: a server trickling a byte every 2 s held `wait --timeout 6` for ever; silent
    and slow ones overran it by ~7 s. Now it may overrun by at most one poll."""
    server = raw(routes)
    start = time.monotonic()
    with pytest.raises(ServeError, match="not ready after 6 s"):
        wait_ready(url=server.url, served_name="smol", timeout_s=6, poll_s=2.0)
    elapsed = time.monotonic() - start
    assert 6 <= elapsed <= 6 + 2.0, elapsed


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"[]", "Input should be an object"),
        (b'{"data": null}', "data: Input should be a valid array"),
        (b'{"data": ["smol", "other"]}', "data.0: Input should be an object"),
        (b'{"data": [{"id": "smol", "max_model_len": "2048"}]}', "data.0.max_model_len: Input should be a valid integer"),
        (b'{"data": [{"id": "smol", "max_model_len": 2048.5}]}', "data.0.max_model_len: Input should be a valid integer"),
        (b'{"data": [{"id": 7}]}', "data.0.id: Input should be a valid string"),
        (b"<html>login</html>", "Invalid JSON"),
    ],
    ids=["list", "data-null", "strings", "len-string", "len-float", "id-int", "html"],
)
def test_a_body_that_is_not_a_model_list_is_a_clear_error_at_once(raw, run_cli, body, said):
    server = raw({"/health": HEALTHY, "/v1/models": _models(body)})
    start = time.monotonic()
    code, _, err = run_cli("wait", "--url", server.url, "--served-name", "smol", "--timeout", "60")
    err = " ".join(err.split())
    assert code == ServeError.exit_code == 40, err
    assert "/v1/models answered 200 but not with an OpenAI model list" in err and said in err
    assert "Traceback" not in err and time.monotonic() - start < 30


def test_bad_content_encoding_on_health_is_a_state_not_a_traceback(raw, run_cli):
    server = raw({"/health": _send(200, b"not gzip", [("content-encoding", "gzip")])})
    code, _, err = run_cli("wait", "--url", server.url, "--served-name", "smol", "--timeout", "2")
    err = " ".join(err.split())
    assert code == 40, err
    assert "not ready after 2 s" in err and "/health answered a body that cannot be decoded" in err


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("127.0.0.1:8000", "has no scheme"),
        ("localhost", "has no scheme"),
        ("ftp://127.0.0.1:8000", "must be http or https"),
        ("http://exa mple:8000", "is not a host name or IP address"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:80:90", "Port could not be cast"),
        ("http://:8000", "is not a host name"),
        ("http://h/?q=1", "query or fragment"),
    ],
)
def test_a_malformed_url_is_refused_before_any_request(run_cli, url, said):
    code, _, err = run_cli("wait", "--url", url, "--served-name", "smol", "--timeout", "5")
    err = " ".join(err.split())
    assert code == 40, err
    assert f"--url {url!r}" in err and said in err and "--url http://127.0.0.1:8000" in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(run_cli, free_port, value):
    code, _, err = run_cli("wait", "--url", f"http://127.0.0.1:{free_port}", "--served-name", "smol", "--timeout", value)
    assert code == 40, err
    assert "--timeout must be a positive number of seconds" in " ".join(err.split())


def test_ipv6_and_base_paths_are_accepted(raw):
    server = raw({"/health": HEALTHY, "/v1/models": _models(b'{"data": [{"id": "smol"}]}')})
    assert wait_ready(url=server.url + "/", served_name="smol", timeout_s=10).max_model_len is None


@pytest.mark.timeout(60)
def test_ctrl_c_ends_a_wait_on_a_silent_server_at_once(raw):
    """The probe runs in a thread; the main thread's join must still take Ctrl-C at once."""
    server = raw({"/health": _silent})
    code = f"from builder.serve.wait import wait_ready; wait_ready(url={server.url!r}, served_name='x', timeout_s=600)"
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert server.asked.wait(30), "the wait never reached the server"
    time.sleep(0.5)  # inside the probe's join now
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - start < 3, err
    assert proc.returncode != 0 and "KeyboardInterrupt" in err


def test_serve_refuses_a_bad_timeout_before_starting_anything(pinned):
    from builder.serve import serve

    with pytest.raises(ServeError, match="--timeout must be a positive number"):
        serve(cfg=pinned("cpu-smoke"), model_dir=Path("/nonexistent"), timeout_s=float("nan"))
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
