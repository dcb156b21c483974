"""The server's API key, as vLLM itself takes it: the VLLM_API_KEY environment variable.

Read from the environment only (never a command-line option, which `ps` and shell history
show) and never printed: serve hands it to the container, wait/gates/bench send it. A server
may echo it back (an error body quoting the request's headers): builder.redact keeps it out of
everything printed and every file written.
"""

from __future__ import annotations

import os

from builder.constants import ENV_VLLM_API_KEY


def api_key() -> str | None:
    """The key in VLLM_API_KEY; an empty value means none, as vLLM reads it."""
    return os.environ.get(ENV_VLLM_API_KEY) or None


def auth_headers(key: str | None = None) -> dict[str, str]:
    key = key if key is not None else api_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def unauthorized_message(status: int, url: str, *, sent_key: bool) -> tuple[str, str]:
    """(message, hint) for a 401/403 answer: never retried, it will not change by waiting."""
    if sent_key:
        return (
            f"{url} answered {status}: the server rejected the key in {ENV_VLLM_API_KEY}",
            f"set {ENV_VLLM_API_KEY} to the key the server was started with (--api-key or its {ENV_VLLM_API_KEY})",
        )
    return (
        f"{url} answered {status}: the server requires an API key and none was sent",
        f"export {ENV_VLLM_API_KEY}=<the server's key> and run the command again",
    )
