"""Docker fixtures for serve tests: the daemon, the locally built base image, a free port."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.image.conftest import pinned  # noqa: F401  (shared fixture)

from builder.constants import REPO_ROOT

BASE_REF = "127.0.0.1:5000/qfn-base:bookworm"


@pytest.fixture(scope="session")
def docker_client():
    from builder.image.daemon import docker_client as connect

    return connect()


@pytest.fixture(scope="session")
def base_image(docker_client):
    """The debootstrap base (python3 inside); built once per machine, reused afterwards."""
    subprocess.run(["bash", str(REPO_ROOT / "scripts/build-base-image.sh"), "--if-missing", BASE_REF], check=True)
    return BASE_REF


@pytest.fixture
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
