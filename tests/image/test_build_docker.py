"""The image step's refusals against a real daemon: no daemon, cross-arch without QEMU binfmt,
a GPU target whose only missing piece is its base image, an edited engine lock, and pinning."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from builder.constants import REPO_ROOT
from builder.errors import DockerError, ImagePinError
from builder.image import build_image, pin_target
from tests.conftest import FAKE_DIGEST

pytestmark = [pytest.mark.docker]


def test_no_daemon_is_a_clear_error(pinned, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DockerError) as err:
        build_image(cfg=pinned("h200"))
    assert "cannot reach the docker daemon" in err.value.message
    assert "dockerd" in err.value.hint


def test_cross_arch_without_qemu_binfmt_is_refused(docker_client, tmp_path, monkeypatch):
    """gb10 is arm64: on an x86_64 daemon its RUN steps need QEMU's binfmt_misc entry; without it
    the build stops before anything is built, saying how to register it."""
    if docker_client.info()["Architecture"] != "x86_64":
        pytest.skip("only an x86_64 daemon emulates arm64")
    import builder.image.base as base

    monkeypatch.setattr(base, "BINFMT_DIR", tmp_path)  # no qemu-aarch64 entry there
    with pytest.raises(DockerError) as err:
        base.emulation_needed(docker_client, "arm64")
    assert "linux/arm64" in err.value.message and "QEMU user emulation" in err.value.message
    assert "host-setup.sh --emulation" in err.value.hint
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    assert base.emulation_needed(docker_client, "arm64") is True
    assert base.emulation_needed(docker_client, "amd64") is False


def _from_upstream_image(target_data, name: str):
    from builder.config import parse_config

    data = target_data(name)
    data["target"]["base_source"] = "image"
    del data["target"]["base_lock"]
    data["target"]["base_image"] = "vllm/vllm-openai@" + FAKE_DIGEST
    return parse_config(data, source=f"{name} from the upstream image")


@pytest.mark.parametrize("name", ["h200", "cmp170hx-x2"])
def test_gpu_target_builds_up_to_its_missing_base_image(target_data, docker_client, fake_repo, name):
    cfg = _from_upstream_image(target_data, name)
    with pytest.raises(DockerError) as err:
        build_image(cfg=cfg, repo_root=fake_repo(series=True))
    msg = err.value.message
    assert f"base image {cfg.target.base_image} of target {name} is not on this host" in msg
    assert "the only input missing" in msg
    assert f"docker pull {cfg.target.base_image}" in err.value.hint
    assert f"builder pin --target {name}" in err.value.hint
    assert "wheel-lock" in err.value.hint  # the way out when no registry is reachable


def test_gpu_target_without_its_patch_series_says_so_before_the_base(target_data, docker_client, fake_repo):
    with pytest.raises(DockerError) as err:
        build_image(cfg=_from_upstream_image(target_data, "h200"), repo_root=fake_repo(series=False))
    assert "bundle/patches/series is missing" in err.value.message


def test_lock_target_with_an_edited_lock_is_refused_before_docker(pinned, fake_repo, tmp_path):
    """The shipped lock with one byte changed: the build stops at the digest check, naming both digests."""
    from builder.errors import LockError

    repo = fake_repo(series=True)
    lock = REPO_ROOT / "docker/locks/vllm-0.33.0-linux-amd64.txt"
    (repo / "docker/locks").mkdir(parents=True, exist_ok=True)
    (repo / "docker/locks" / lock.name).write_text(lock.read_text() + "# edited\n")
    cfg = pinned("h200", lock_digest="sha256:" + hashlib.sha256(lock.read_bytes()).hexdigest())
    with pytest.raises(LockError) as err:
        build_image(cfg=cfg, repo_root=repo)
    assert "but the target pins" in err.value.message


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
