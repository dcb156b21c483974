"""Fixtures for argument checks: a local TCP listener that records every connection (the docker
daemon, a server or the Hub a bad run would contact), and a cpu-smoke target with a pinned base."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.constants import TARGETS_DIR
from tests.conftest import FAKE_DIGEST


class Listener:
    """Accepts on 127.0.0.1 and closes each connection at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def seen(self) -> int:
        """Connections so far; the kernel queues a connect before accept() returns, so poll a little."""
        import time

        deadline = time.monotonic() + 0.3
        while not self.connections and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.connections


@pytest.fixture
def listener(monkeypatch) -> Iterator[Listener]:
    """The listener, also as the docker daemon (DOCKER_HOST)."""
    server = Listener()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.port}")
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    yield server
    server.sock.close()


@pytest.fixture
def pinned_cpu_smoke(tmp_path) -> Path:
    """targets/cpu-smoke.toml with its base pinned to a well-formed digest, so a run gets past the
    pin check to where docker would be contacted."""
    text = (TARGETS_DIR / "cpu-smoke.toml").read_text()
    base = 'base_image = "127.0.0.1:5000/qfn-base:bookworm"'
    assert base in text
    path = tmp_path / "targets" / "cpu-smoke.toml"
    path.parent.mkdir()
    path.write_text(text.replace(base, f'base_image = "127.0.0.1:5000/qfn-base@{FAKE_DIGEST}"'))
    return path
