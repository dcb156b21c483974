"""The docker daemon connection, with the one clear error every docker-using step raises."""

from __future__ import annotations

import docker
from docker.errors import DockerException

from builder.constants import DOCKER_API_TIMEOUT_S
from builder.errors import DockerError


def docker_client(*, timeout: float = DOCKER_API_TIMEOUT_S) -> docker.DockerClient:
    """A pinged client. ``timeout`` bounds each API read: builds, commits and removals of a multi-GB
    engine layer on a busy host take minutes, so those callers pass DOCKER_SLOW_API_TIMEOUT_S."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise DockerError(
            f"cannot reach the docker daemon ({exc})",
            hint="start it (`sudo dockerd &`, or `bash scripts/host-setup.sh`), or set DOCKER_HOST",
        ) from exc
    return client


def daemon_arch(client: docker.DockerClient) -> str:
    """The daemon's architecture in docker platform spelling (amd64, arm64)."""
    arch = client.info().get("Architecture", "")
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)
