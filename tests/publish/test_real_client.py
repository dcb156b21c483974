"""The real HfApi against a local stand-in for the Hub's HTTP API: the client's own error mapping
decides what publish sees, and the token travels only in the Authorization header."""

from __future__ import annotations

import io
import json
import threading
import time
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from rich.console import Console

from builder import constants
from builder.errors import PublishAuthError, PublishError, PublishNetworkError, PublishPermissionError
from builder.publish import PublishRequest, publish
from tests.listeners import LocalListener
from tests.publish.conftest import FAKE_TOKEN, public_key


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
        # "{authorization}" echoes the header back, as some proxies and debug endpoints do.
        echo = self.headers.get("authorization") or ""
        body = {k: v.replace("{authorization}", echo) if isinstance(v, str) else v for k, v in body.items()}
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
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), yes=True)
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


def _all_output(info: pytest.ExceptionInfo, printed: str) -> str:
    """What a user or a log could see: the printed lines, the error and its hint, and its traceback
    as Python (or logging.exception) prints it, chained errors included."""
    return "\n".join([printed, info.value.message, info.value.hint or "", *traceback.format_exception(info.value)])


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        ({"/api/repos/create": [(400, {"error": "bad header Authorization: {authorization}"})]}, PublishError),
        ({"/api/repos/create": [(500, {"error": "upstream failed for {authorization}"})]}, PublishNetworkError),
        ({"/api/repos/create": [(403, {"error": "token {authorization} may not write"})]}, PublishPermissionError),
    ],
    ids=["400", "500-retried", "403"],
)
def test_a_token_echoed_in_an_error_body_is_redacted_everywhere(bundle, scripted, monkeypatch, script, kind):
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    server = scripted(script)
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), yes=True)
    factory = lambda *, token: HfApi(endpoint=server.endpoint, token=token)  # noqa: E731
    with pytest.raises(kind) as info:
        publish(request=request, console=Console(file=out, width=200), api_factory=factory, sleep=lambda s: None)
    everything = _all_output(info, out.getvalue())
    assert {auth for _, _, auth in server.seen} == {f"Bearer {FAKE_TOKEN}"}  # it was sent, and echoed
    assert FAKE_TOKEN not in everything
    assert "<redacted>" in info.value.message


class SilentHub(LocalListener):
    """Accepts every connection and never answers: the Hub behind a stuck proxy."""

    @property
    def endpoint(self) -> str:
        return self.url


@pytest.fixture
def silent_hub(monkeypatch) -> Iterator[SilentHub]:
    hub = SilentHub()
    # Short timeouts and backoff so the test takes seconds, not the real 5 x 60 s.
    monkeypatch.setattr(constants, "PUBLISH_CONNECT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(constants, "PUBLISH_READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(constants, "PUBLISH_RETRY_INITIAL_S", 0.05)
    monkeypatch.setattr(constants, "PUBLISH_RETRY_MAX_S", 0.1)
    yield hub
    hub.close()


@pytest.mark.timeout(60)
def test_a_hub_that_never_answers_times_out_then_retries_then_gives_up(bundle, silent_hub, monkeypatch):
    """The issue: `publish --yes` against such an endpoint hung for ever (the client had no timeout)."""
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), yes=True)
    factory = lambda *, token: HfApi(endpoint=silent_hub.endpoint, token=token)  # noqa: E731
    start = time.monotonic()
    with pytest.raises(PublishNetworkError, match="cannot reach the Hub to create repo qfn/release after 5 attempts: ReadTimeout"):
        publish(request=request, console=Console(file=out, width=200), api_factory=factory)
    assert time.monotonic() - start < 20
    deadline = time.monotonic() + 5  # the accept thread may lag behind the kernel's handshake
    while len(silent_hub.connections) < constants.PUBLISH_RETRY_ATTEMPTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(silent_hub.connections) == constants.PUBLISH_RETRY_ATTEMPTS
    assert out.getvalue().count("ReadTimeout; retry") == constants.PUBLISH_RETRY_ATTEMPTS - 1
    from huggingface_hub import get_session

    assert get_session().timeout.read is None  # the library's own client is left as it was


@pytest.mark.timeout(60)
def test_cli_publish_to_a_hub_that_never_answers_exits_63(bundle, silent_hub, monkeypatch, run_cli):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    monkeypatch.setattr(hf_constants, "ENDPOINT", silent_hub.endpoint)
    code, out, err = run_cli("publish", str(bundle), "--repo", "qfn/release", "--public-key", str(public_key()), "--yes")
    assert code == PublishNetworkError.exit_code == 63, out + err
    assert "cannot reach the Hub" in " ".join(err.split()) and FAKE_TOKEN not in out + err
