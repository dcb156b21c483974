"""Fixtures for argument checks: a local TCP listener that records every connection (the docker
daemon, a server or the Hub a bad run would contact), and a cpu-smoke target with a pinned base."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.constants import TARGETS_DIR
from tests.conftest import FAKE_DIGEST
from tests.listeners import LocalListener


class Listener(LocalListener):
    """Closes each connection at once: only that it was made matters."""

    def handle(self, conn) -> None:
        conn.close()


@pytest.fixture
def listener(monkeypatch) -> Iterator[Listener]:
    """The listener, also as the docker daemon (DOCKER_HOST)."""
    server = Listener()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.port}")
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    yield server
    server.close()


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
