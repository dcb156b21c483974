"""`builder image` and `builder base lock / build` check --ca-bundle before the docker daemon is contacted."""

from __future__ import annotations

import pytest

from builder.errors import DockerError


def test_a_missing_ca_bundle_is_refused_before_docker(listener, run_cli, pinned_cpu_smoke, tmp_path):
    code, out, err = run_cli("image", "--target", str(pinned_cpu_smoke), "--ca-bundle", str(tmp_path / "none.pem"))
    assert code == DockerError.exit_code, out + err
    assert "--ca-bundle" in err and "is not a readable file" in err and "fix:" in err
    assert listener.seen() == 0


def test_a_good_ca_bundle_goes_on_to_docker(listener, run_cli, pinned_cpu_smoke, tmp_path):
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    code, out, err = run_cli("image", "--target", str(pinned_cpu_smoke), "--ca-bundle", str(tmp_path / "ca.pem"))
    assert code == DockerError.exit_code and "cannot reach the docker daemon" in err, out + err
    assert listener.seen() >= 1


@pytest.mark.parametrize("command", [["base", "lock", "--platform", "linux/amd64"], ["base", "build", "--target", "gb10"]])
def test_base_commands_refuse_a_missing_ca_bundle_before_docker(listener, run_cli, tmp_path, command):
    code, out, err = run_cli(*command, "--ca-bundle", str(tmp_path / "none.pem"))
    assert code == DockerError.exit_code, out + err
    assert "--ca-bundle" in err and "is not a readable file" in err and "fix:" in err
    assert listener.seen() == 0
