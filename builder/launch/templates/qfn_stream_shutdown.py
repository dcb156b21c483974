"""ASGI middleware for vLLM's `--middleware`: when the server shuts down, end the responses that
are still open instead of leaving them hanging.

On SIGTERM vLLM's API server first stops its engine (in-flight requests may finish for
--shutdown-timeout seconds), then asks uvicorn to exit, and uvicorn waits for every open
response to finish. A stream whose engine is gone never finishes, so the HTTP side hung until
docker's SIGKILL and clients saw a cut connection. Once the server is exiting, this ends each
open stream with an error event and `data: [DONE]` (and answers a non-streamed request that
has not started with a 503), so clients get a clean end and the process exits 0.

Shipped beside the launch script, which puts this folder on PYTHONPATH; needs only the stdlib.
"""

from __future__ import annotations

import asyncio
import json

POLL_S = 0.2
MESSAGE = "The server is shutting down; this request was stopped before it finished."


class EndStreamsOnShutdown:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "sse": False, "done": False, "ended_here": False}

        async def tracked_send(message) -> None:
            if state["ended_here"]:
                return  # the response was already ended here; the handler is being cancelled
            if message["type"] == "http.response.start":
                state["started"] = True
                headers = dict(message.get("headers") or [])
                state["sse"] = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["done"] = True
            await send(message)

        handler = asyncio.ensure_future(self.app(scope, receive, tracked_send))
        while not handler.done():
            await asyncio.wait([handler], timeout=POLL_S)
            if handler.done() or state["done"] or not _exiting(scope):
                continue
            state["ended_here"] = True
            await _end(send, state)
            handler.cancel()
            try:
                await handler
            except asyncio.CancelledError:
                pass
            return
        handler.result()


def _exiting(scope) -> bool:
    """uvicorn's should_exit, which vLLM sets once its engine client has stopped."""
    app = scope.get("app")
    server = getattr(getattr(app, "state", None), "server", None)
    return bool(getattr(server, "should_exit", False))


async def _end(send, state) -> None:
    error = {"error": {"message": MESSAGE, "type": "ServiceUnavailableError", "code": 503}}
    if not state["started"]:
        body = json.dumps(error).encode()
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": False})
    elif state["sse"]:
        tail = f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()
        await send({"type": "http.response.body", "body": tail, "more_body": False})
    else:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
