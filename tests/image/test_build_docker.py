"""The image step's refusals against a real daemon: no daemon, cross-arch without buildx,
a GPU target whose only missing piece is its base image, and pinning."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from builder.constants import REPO_ROOT
from builder.errors import DockerError, ImagePinError
from builder.image import build_image, pin_target

pytestmark = [pytest.mark.docker]


def test_no_daemon_is_a_clear_error(pinned, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DockerError) as err:
        build_image(cfg=pinned("h200"))
    assert "cannot reach the docker daemon" in err.value.message
    assert "dockerd" in err.value.hint


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")
def test_cross_arch_without_buildx_is_refused(pinned, docker_client):
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0:
        pytest.skip("buildx is installed here: the cross build would run")
    if docker_client.info()["Architecture"] != "x86_64":
        pytest.skip("gb10 is arm64: only a cross build on an x86_64 daemon")
    with pytest.raises(DockerError) as err:
        build_image(cfg=pinned("gb10"))
    assert "linux/arm64" in err.value.message and "buildx is not installed" in err.value.message
    assert "qemu-user-static" in err.value.hint


@pytest.mark.parametrize("name", ["h200", "cmp170hx-x2"])
def test_gpu_target_builds_up_to_its_missing_base_image(pinned, docker_client, fake_repo, name):
    cfg = pinned(name)
    with pytest.raises(DockerError) as err:
        build_image(cfg=cfg, repo_root=fake_repo(series=True))
    msg = err.value.message
    assert f"base image {cfg.target.base_image} of target {name} is not on this host" in msg
    assert "the only input missing" in msg
    assert f"docker pull {cfg.target.base_image}" in err.value.hint
    assert f"builder pin --target {name}" in err.value.hint


def test_gpu_target_without_its_patch_series_says_so_before_the_base(pinned, docker_client, fake_repo):
    with pytest.raises(DockerError) as err:
        build_image(cfg=pinned("h200"), repo_root=fake_repo(series=False))
    assert "bundle/patches/series is missing" in err.value.message


@pytest.fixture
def target_copy(tmp_path):
    path = tmp_path / "cpu-smoke.toml"
    shutil.copy(REPO_ROOT / "targets/cpu-smoke.toml", path)
    return path


def test_pin_refuses_an_image_that_is_not_here(target_copy, docker_client):
    target_copy.write_text(target_copy.read_text().replace("qfn-base:bookworm", "qfn-base:no-such-tag"))
    with pytest.raises(ImagePinError) as err:
        pin_target(target=str(target_copy))
    assert "qfn-base:no-such-tag" in err.value.message and "not on this host" in err.value.message


def test_pin_refuses_an_image_without_registry_digest(target_copy, docker_client, base_image):
    local = "qfn-int8kv-test/imported:nodigest"
    docker_client.images.get(base_image).tag(local)
    try:
        target_copy.write_text(target_copy.read_text().replace("127.0.0.1:5000/qfn-base:bookworm", local))
        with pytest.raises(ImagePinError) as err:
            pin_target(target=str(target_copy))
        assert "no registry digest" in err.value.message
        assert "local-registry.sh" in err.value.hint
    finally:
        docker_client.images.remove(local)


def test_pin_writes_the_digest_and_keeps_comments(target_copy, docker_client, base_image):
    before = target_copy.read_text()
    pinned_ref = pin_target(target=str(target_copy))
    after = target_copy.read_text()
    assert pinned_ref.startswith("127.0.0.1:5000/qfn-base@sha256:")
    assert f'base_image = "{pinned_ref}"' in after
    assert [line for line in before.splitlines() if line.startswith("#")] == [
        line for line in after.splitlines() if line.startswith("#")
    ]
    assert pin_target(target=str(target_copy)) == pinned_ref  # pinning again changes nothing
    assert target_copy.read_text() == after
