"""`image --sign-key` and `attest` check the key before docker is contacted; without --sign-key the
build is called exactly as before and nothing is attested."""

from __future__ import annotations

import pytest

import builder.image
import builder.image.attest
from builder.keys import generate_key_pair


@pytest.fixture
def no_docker(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("docker was contacted")

    monkeypatch.setattr(builder.image, "build_image", refuse)
    monkeypatch.setattr(builder.image.attest, "docker_client", refuse)


@pytest.fixture
def key(tmp_path):
    generate_key_pair(private_path=tmp_path / "k.pem", public_path=tmp_path / "k.pub")
    return tmp_path / "k.pem"


@pytest.mark.parametrize("command", [["image", "--target", "h200"], ["attest", "--target", "h200"]])
def test_a_key_others_may_read_is_refused_before_docker(no_docker, key, run_cli, command):
    key.chmod(0o640)
    code, _, err = run_cli(*command, "--sign-key", str(key))
    assert code == 80 and "--sign-key k.pem is readable or writable by group or others" in err and "chmod 600" in err


@pytest.mark.parametrize("command", [["image", "--target", "h200"], ["attest", "--target", "h200"]])
def test_a_missing_key_is_refused_before_docker(no_docker, tmp_path, run_cli, command):
    code, _, err = run_cli(*command, "--sign-key", str(tmp_path / "absent.pem"))
    assert code == 80 and "--sign-key absent.pem" in err


def test_attest_out_without_a_key_is_refused(no_docker, tmp_path, run_cli):
    code, _, err = run_cli("image", "--target", "h200", "--attest-out", str(tmp_path / "a"))
    assert code == 81 and "--attest-out needs --sign-key" in err


def test_without_a_key_the_build_is_unchanged_and_nothing_is_attested(monkeypatch, run_cli):
    from builder.image.build import BuiltImage

    calls = []
    monkeypatch.setattr(builder.image, "build_image", lambda **kw: calls.append(kw) or BuiltImage(tag="qfn-int8kv:h200-0.1.0", id="sha256:" + "0" * 64, labels={}, seconds=1))
    monkeypatch.setattr(builder.image.attest, "attest_image", lambda **kw: pytest.fail("attested without --sign-key"))
    code, out, err = run_cli("image", "--target", "h200")
    assert code == 0, err
    assert out.strip() == "qfn-int8kv:h200-0.1.0"
    assert [sorted(kw) for kw in calls] == [["ca_bundle", "cfg", "console"]] and calls[0]["ca_bundle"] is None
