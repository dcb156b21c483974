"""bundle/launch/qfn_stream_shutdown.py, the ASGI middleware the launch gives vLLM, driven with a
real asyncio ASGI app: an open stream ends with an error event and [DONE] once the server exits."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from types import SimpleNamespace

from builder.constants import LAUNCH_MIDDLEWARE_CLASS, LAUNCH_MIDDLEWARE_NAME, LAUNCH_TEMPLATES_DIR

_spec = importlib.util.spec_from_file_location("qfn_stream_shutdown", LAUNCH_TEMPLATES_DIR / "qfn_stream_shutdown.py")
mw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mw)


def test_the_plan_names_the_class_the_file_defines():
    module, cls = LAUNCH_MIDDLEWARE_CLASS.rsplit(".", 1)
    assert LAUNCH_MIDDLEWARE_NAME == f"launch/{module}.py" and hasattr(mw, cls)


def _run(app, *, exit_after: float) -> list[dict]:
    server = SimpleNamespace(should_exit=False)
    scope = {"type": "http", "app": SimpleNamespace(state=SimpleNamespace(server=server))}
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        await asyncio.sleep(3600)

    async def go():
        asyncio.get_running_loop().call_later(exit_after, setattr, server, "should_exit", True)
        await asyncio.wait_for(mw.EndStreamsOnShutdown(app)(scope, receive, send), timeout=10)

    asyncio.run(go())
    return sent


def test_an_open_stream_ends_with_an_error_event_and_done_when_the_server_exits():
    cancelled = []

    async def endless_stream(scope, receive, send):  # a stream whose engine is gone: never ends
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b'data: {"choices": []}\n\n', "more_body": True})
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    sent = _run(endless_stream, exit_after=0.3)
    last = sent[-1]
    assert last["more_body"] is False
    events = last["body"].decode().strip().split("\n\n")
    assert json.loads(events[0].removeprefix("data: "))["error"]["code"] == 503
    assert events[1] == "data: [DONE]"
    assert cancelled == [True]  # the handler does not linger as a background task


def test_a_request_not_yet_answered_gets_a_503():
    async def waiting(scope, receive, send):
        await asyncio.sleep(3600)

    sent = _run(waiting, exit_after=0.3)
    assert sent[0]["status"] == 503 and sent[-1]["more_body"] is False


def test_a_response_that_finishes_is_left_alone():
    async def quick(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    sent = _run(quick, exit_after=0.0)
    assert [m.get("body") for m in sent] == [None, b"{}"]
