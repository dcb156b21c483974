"""`builder publish` as users run it: a dry run by default, refusals as distinct exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from builder import cli, constants
from builder.errors import GatesNotPassed, PublishAuthError, PublishError, UnverifiedBundle
from tests.publish.conftest import FAKE_TOKEN, gate_file, make_bundle, public_key

def builder(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != constants.ENV_HF_TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=constants.REPO_ROOT,
        env={**base, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_prints_the_plan_and_exits_zero(tmp_path):
    bundle = make_bundle(tmp_path / "gb10")
    hf_home = tmp_path / "hf-home"
    result = builder("publish", str(bundle), "--repo", "qfn/release", "--public-key", str(public_key()), env={"HF_TOKEN": FAKE_TOKEN, "HF_HOME": str(hf_home)})
    assert result.returncode == 0, result.stderr
    for text in ("Files to upload (18", "CHECKSUMS.sha256", "qfn/release", "Release gb10 0.3.1", "dry run"):
        assert text in result.stdout
    assert FAKE_TOKEN not in result.stdout + result.stderr
    assert not hf_home.exists() or all(FAKE_TOKEN.encode() not in p.read_bytes() for p in hf_home.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("setup", "args", "error"),
    [
        (lambda b: (b / "patches/series").write_text("tampered\n"), [], UnverifiedBundle),
        (lambda b: make_bundle(b, gates={"needle": gate_file("needle", verdict="fail")}), [], GatesNotPassed),
        (lambda b: None, ["--yes"], PublishAuthError),
        (lambda b: None, ["--repo", "not-a-repo-id"], PublishError),
    ],
)
def test_refusals_exit_with_their_own_code_and_a_fix(tmp_path, setup, args, error, monkeypatch, capsys):
    bundle = make_bundle(tmp_path / "gb10")
    setup(bundle)
    monkeypatch.setattr(sys, "argv", ["builder", "publish", str(bundle), "--repo", "qfn/release", "--public-key", str(public_key()), *args])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out = capsys.readouterr()
    assert exited.value.code == error.exit_code, out.out + out.err
    assert "error:" in out.err and "fix:" in out.err
