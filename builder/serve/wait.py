"""Wait for an OpenAI-compatible server to become ready, failing fast when it cannot.

connection refused -> still loading; /health 200 and /v1/models lists the served name -> ready;
503 -> engine dead, fail now; a /v1/models answer that is not a model list -> not a vLLM server,
fail now; container exited (or OOMKilled) -> fail now with its last log lines.

401/403 from /v1/models -> the API key is missing or wrong, fail now (waiting cannot fix it).

The timeout is one deadline for the whole wait: every request gets at most the time left, and a
server that answers slowly, never, or one byte at a time cannot hold the wait past it.
"""

from __future__ import annotations

import ipaddress
import math
import re
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.text import Text

from builder.errors import ServeError
from builder.redact import redact
from builder.serve.auth import api_key, auth_headers, unauthorized_message

#: Seconds between polls, and between progress lines when the output is not a terminal.
POLL_S = 2.0
LOG_EVERY_S = 30.0
LOG_TAIL_LINES = 50
#: Longest one request may take (less when the deadline is nearer).
REQUEST_TIMEOUT_S = 5.0

_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")


class NotReady(Exception):
    """The server is still starting; ``state`` says what the last poll saw."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


class _CutOff(NotReady):
    """The deadline came before the server finished answering."""


class Ready(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    served_name: str
    max_model_len: int | None
    seconds: float


class _ModelCard(BaseModel):
    """One entry of vLLM's /v1/models; strict, so "2048" or 2048.5 is not taken for a length."""

    model_config = ConfigDict(strict=True)
    id: str
    max_model_len: int | None = None


class _ModelList(BaseModel):
    data: list[_ModelCard] = Field(description="OpenAI's list of models.")


#: Called on every poll; raises ServeError when the server process is gone.
AliveCheck = Callable[[], None]


def check_timeout(timeout_s: float) -> float:
    """A wait needs a finite, positive number of seconds (nan never compares true, inf never ends)."""
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ServeError(
            f"--timeout must be a positive number of seconds, not {timeout_s!r}",
            hint="e.g. --timeout 2700 (45 min, the default)",
        )
    return float(timeout_s)


def base_url(url: str) -> str:
    """`url` checked and without a trailing slash: http(s), a valid host, an optional port and path."""
    hint = "pass the server's base URL, e.g. --url http://127.0.0.1:8000"
    if "://" not in url:
        raise ServeError(f"--url {url!r} has no scheme", hint=hint)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed '[' of an IPv6 address
        raise ServeError(f"--url {url!r}: {exc}", hint=hint) from None
    if parts.scheme not in ("http", "https"):
        raise ServeError(f"--url {url!r}: the scheme must be http or https, not {parts.scheme!r}", hint=hint)
    if parts.query or parts.fragment:
        raise ServeError(f"--url {url!r} has a query or fragment; a base URL has neither", hint=hint)
    try:
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise ServeError(f"--url {url!r}: {exc}", hint=hint) from None
    if not host or not _valid_host(host):
        raise ServeError(f"--url {url!r}: {host or '(empty)'!r} is not a host name or IP address", hint=hint)
    if port == 0:
        raise ServeError(f"--url {url!r}: port 0 is not a port a server listens on", hint=hint)
    return url.rstrip("/")


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOST_NAME.match(host))


def wait_ready(
    *,
    url: str,
    served_name: str,
    timeout_s: float,
    alive: AliveCheck | None = None,
    console: Console | None = None,
    poll_s: float = POLL_S,
    key: str | None = None,
) -> Ready:
    """``key``: the server's API key; default VLLM_API_KEY from the environment."""
    timeout_s = check_timeout(timeout_s)
    key = key if key is not None else api_key()
    headers = auth_headers(key)
    base = base_url(url)
    console = console or Console(stderr=True)
    start = time.monotonic()
    deadline = start + timeout_s
    progress = _Progress(console=console, url=base, start=start)
    state = ""  # what the last answered poll saw
    try:
        while True:
            if alive is not None:
                alive()
            try:
                ready = _probe_within(
                    base=base, served_name=served_name, start=start, seconds=deadline - time.monotonic(), headers=headers
                )
                break
            except _CutOff as exc:
                # A poll cut short by the deadline says less than the last one that was answered.
                state = f"{state}; then {redact(exc.state, key)}" if state else redact(exc.state, key)
            except NotReady as exc:
                # States quote the server (the models it lists), which may echo the Authorization header.
                state = redact(exc.state, key)
                progress.update(state)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServeError(
                    f"{base} not ready after {timeout_s:g} s (last state: {state})",
                    hint="raise --timeout if the model is still loading, or check the server log",
                )
            time.sleep(min(poll_s, left))
    except ServeError as exc:
        # Its message may quote the server or the container's log (the alive check's last lines).
        raise ServeError(redact(exc.message, key), hint=exc.hint and redact(exc.hint, key)) from None
    finally:
        progress.close()
    console.print(
        f"serve: {base} ready in {ready.seconds:.0f} s, serving '{served_name}'", soft_wrap=True, markup=False, highlight=False
    )
    return ready


def _probe_within(*, base: str, served_name: str, start: float, seconds: float, headers: dict[str, str]) -> Ready:
    """One probe that returns (or gives up) within `seconds`, whatever the server does.

    httpx's timeouts bound each read, not a whole answer: a server trickling a byte at a time
    could hold a request forever. The probe runs in a daemon thread that is abandoned at the
    deadline; its own per-read timeout then ends it soon after.
    """
    seconds = max(seconds, 0.0)
    outcome: list[Ready | BaseException] = []

    def run() -> None:
        try:
            timeout = httpx.Timeout(min(REQUEST_TIMEOUT_S, seconds) or 0.001)
            with httpx.Client(timeout=timeout, trust_env=False, headers=headers) as client:
                outcome.append(_probe(client=client, base=base, served_name=served_name, start=start))
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome.append(exc)

    worker = threading.Thread(target=run, name="builder-wait-probe", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise _CutOff("no complete answer before the deadline (the server is slow, silent or trickling)")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _probe(*, client: httpx.Client, base: str, served_name: str, start: float) -> Ready:
    try:
        health = client.get(f"{base}/health")
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise NotReady("port closed (loading)") from exc
    except httpx.TimeoutException as exc:
        raise NotReady("health check timed out") from exc
    except httpx.DecodingError as exc:
        raise NotReady(f"/health answered a body that cannot be decoded ({exc})") from exc
    except httpx.HTTPError as exc:
        raise NotReady(f"/health failed ({type(exc).__name__}: {exc})") from exc
    if health.status_code == 503:
        raise ServeError(
            f"{base}/health answered 503: the engine is dead",
            hint="read the server log for the engine's error; restarting will not help until it is fixed",
        )
    if health.status_code != 200:
        raise NotReady(f"/health answered {health.status_code}")
    try:
        models = client.get(f"{base}/v1/models")
    except httpx.HTTPError as exc:
        raise NotReady(f"/v1/models failed ({type(exc).__name__})") from exc
    if models.status_code in (401, 403):
        message, hint = unauthorized_message(models.status_code, f"{base}/v1/models", sent_key="authorization" in client.headers)
        raise ServeError(message, hint=hint)
    if models.status_code != 200:
        raise NotReady(f"/v1/models answered {models.status_code}")
    try:
        entries = _ModelList.model_validate_json(models.content).data
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"]) or "the body"
        raise ServeError(
            f"{base}/v1/models answered 200 but not with an OpenAI model list ({where}: {first['msg']})",
            hint="point --url at the vLLM server itself (check the host and port)",
        ) from None
    for entry in entries:
        if entry.id == served_name:
            return Ready(url=base, served_name=served_name, max_model_len=entry.max_model_len, seconds=time.monotonic() - start)
    listed = ", ".join(e.id for e in entries) or "nothing"
    raise NotReady(f"healthy, but /v1/models lists {listed}, not {served_name}")


class _Progress:
    """One live line on a terminal; a line every LOG_EVERY_S (or on change) in CI logs."""

    def __init__(self, *, console: Console, url: str, start: float) -> None:
        self._console, self._url, self._start = console, url, start
        self._status = console.status("") if console.is_terminal else None
        if self._status is not None:
            self._status.start()
        self._last_state, self._last_log = "", 0.0

    def update(self, state: str) -> None:
        elapsed = time.monotonic() - self._start
        text = f"serve: waiting for {self._url} [{_fmt(elapsed)}] {state}"
        if self._status is not None:
            self._status.update(Text(text))
        elif state != self._last_state or elapsed - self._last_log >= LOG_EVERY_S:
            self._console.print(text, highlight=False, markup=False, soft_wrap=True)
            self._last_state, self._last_log = state, elapsed

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()


def _fmt(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m:d}:{s:02d}"
