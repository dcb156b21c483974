"""Serve a target's image with docker and wait until the endpoint is ready.

The names load on first use, so `builder.serve.wait` (httpx only) is usable where the docker
SDK and the image tooling are not installed, e.g. the engine harness waiting on a bare server.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "container_name": "builder.serve.container",
    "Interrupted": "builder.serve.lifecycle",
    "Served": "builder.serve.lifecycle",
    "serve": "builder.serve.lifecycle",
    "stop": "builder.serve.lifecycle",
    "Ready": "builder.serve.wait",
    "wait_ready": "builder.serve.wait",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
