"""The real HfApi against a local stand-in for the Hub's HTTP API: the client's own error mapping
decides what publish sees, and the token travels only in the Authorization header."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from rich.console import Console

from builder import constants
from builder.errors import PublishAuthError, PublishPermissionError
from builder.publish import PublishRequest, publish
from tests.publish.conftest import FAKE_TOKEN


class ScriptedHub(ThreadingHTTPServer):
    """Answers each request path with the next scripted (status, body); records what arrived."""

    def __init__(self, script: dict[str, list[tuple[int, dict]]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.seen: list[tuple[str, str, str | None]] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedHub

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        self.server.seen.append((self.command, path, self.headers.get("authorization")))
        queue = self.server.script.get(path) or [(404, {"error": f"unscripted {path}"})]
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if "error" in body:
            self.send_header("x-error-message", body["error"])
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:  # keep test output quiet
        return


@pytest.fixture
def scripted() -> Iterator[callable]:
    servers: list[ScriptedHub] = []

    def start(script: dict[str, list[tuple[int, dict]]]) -> ScriptedHub:
        server = ScriptedHub(script)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def upload(bundle: Path, server: ScriptedHub, sleeps: list[float]) -> str:
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", yes=True)
    factory = lambda *, token: HfApi(endpoint=server.endpoint, token=token)  # noqa: E731
    publish(request=request, console=Console(file=out, width=200), api_factory=factory, sleep=sleeps.append)
    return out.getvalue()


def test_real_client_retries_503_and_stops_at_403(bundle, scripted, monkeypatch):
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    server = scripted(
        {
            "/api/repos/create": [(503, {"error": "busy"}), (503, {"error": "busy"}), (200, {"url": "x/qfn/release"})],
            "/api/models/qfn/release/refs": [(403, {"error": "You don't have write access to qfn/release"})],
        }
    )
    sleeps: list[float] = []
    with pytest.raises(PublishPermissionError, match="may not write to qfn/release.*write access"):
        upload(bundle, server, sleeps)
    assert [(m, p) for m, p, _ in server.seen] == [("POST", "/api/repos/create")] * 3 + [("GET", "/api/models/qfn/release/refs")]
    assert {auth for _, _, auth in server.seen} == {f"Bearer {FAKE_TOKEN}"}
    assert len(sleeps) == 2


def test_real_client_invalid_token_is_an_auth_error_without_retry(bundle, scripted, monkeypatch):
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    server = scripted({"/api/repos/create": [(401, {"error": "Invalid credentials in Authorization header"})]})
    sleeps: list[float] = []
    with pytest.raises(PublishAuthError, match="rejected the token") as info:
        upload(bundle, server, sleeps)
    # create_repo(exist_ok=True) may look the repo up after a refusal; it never re-sends the create.
    assert [p for m, p, _ in server.seen if m == "POST"] == ["/api/repos/create"] and sleeps == []
    assert FAKE_TOKEN not in str(info.value)
