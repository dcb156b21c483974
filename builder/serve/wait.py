"""Wait for an OpenAI-compatible server to become ready, failing fast when it cannot.

connection refused -> still loading; /health 200 and /v1/models lists the served name -> ready;
503 -> engine dead, fail now; container exited (or OOMKilled) -> fail now with its last log lines;
401/403 from /v1/models -> the API key is missing or wrong, fail now (waiting cannot fix it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from builder.errors import ServeError
from builder.serve.auth import api_key, auth_headers, unauthorized_message

#: Seconds between polls, and between progress lines when the output is not a terminal.
POLL_S = 2.0
LOG_EVERY_S = 30.0
LOG_TAIL_LINES = 50


class NotReady(Exception):
    """The server is still starting; ``state`` says what the last poll saw."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


class Ready(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    served_name: str
    max_model_len: int | None
    seconds: float


#: Called on every poll; raises ServeError when the server process is gone.
AliveCheck = Callable[[], None]


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
    console = console or Console(stderr=True)
    key = key if key is not None else api_key()
    base = url.rstrip("/")
    start = time.monotonic()
    progress = _Progress(console=console, url=base, start=start)
    with httpx.Client(timeout=httpx.Timeout(5.0), trust_env=False, headers=auth_headers(key)) as client:

        def poll() -> Ready:
            if alive is not None:
                alive()
            try:
                return _probe(client=client, base=base, served_name=served_name, start=start)
            except NotReady as exc:
                progress.update(exc.state)
                raise

        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(NotReady),
                stop=stop_after_delay(timeout_s),
                wait=wait_fixed(poll_s),
                reraise=False,
            ):
                with attempt:
                    ready = poll()
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise ServeError(
                f"{base} not ready after {timeout_s:.0f} s (last state: {getattr(last, 'state', last)})",
                hint="raise --timeout if the model is still loading, or check the server log",
            ) from None
        finally:
            progress.close()
    console.print(f"serve: {base} ready in {ready.seconds:.0f} s, serving '{served_name}'", soft_wrap=True)
    return ready


def _probe(*, client: httpx.Client, base: str, served_name: str, start: float) -> Ready:
    try:
        health = client.get(f"{base}/health")
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise NotReady("port closed (loading)") from exc
    except httpx.TimeoutException as exc:
        raise NotReady("health check timed out") from exc
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
        entries = models.json().get("data", [])
    except ValueError as exc:
        raise NotReady("/v1/models is not JSON") from exc
    for entry in entries:
        if entry.get("id") == served_name:
            return Ready(
                url=base,
                served_name=served_name,
                max_model_len=entry.get("max_model_len"),
                seconds=time.monotonic() - start,
            )
    listed = ", ".join(str(e.get("id")) for e in entries) or "nothing"
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
            self._status.update(text)
        elif state != self._last_state or elapsed - self._last_log >= LOG_EVERY_S:
            self._console.print(text, highlight=False, markup=False, soft_wrap=True)
            self._last_state, self._last_log = state, elapsed

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()


def _fmt(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m:d}:{s:02d}"
