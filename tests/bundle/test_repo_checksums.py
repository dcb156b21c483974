"""The repo's CHECKSUMS.sha256 lists exactly the shipped sources and matches them.

When this fails after you changed bundle/, evidence/, Dockerfile or docker/: run `make checksums`.
"""

from __future__ import annotations

import subprocess

from builder.bundle import repo_manifest_text, shipped_files, write_repo_checksums
from builder.constants import REPO_ROOT


def test_repo_checksums_pass_sha256sum():
    check = subprocess.run(
        ["sha256sum", "-c", "--strict", "--quiet", "CHECKSUMS.sha256"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, f"run `make checksums`:\n{check.stdout}{check.stderr}"


def test_repo_checksums_list_every_shipped_file():
    listed = (REPO_ROOT / "CHECKSUMS.sha256").read_text()
    assert listed == repo_manifest_text(REPO_ROOT), "shipped sources changed without `make checksums`"


def test_shipped_sources_skip_what_does_not_exist_and_caches(tmp_path):
    (tmp_path / "bundle/launch").mkdir(parents=True)
    (tmp_path / "bundle/launch/x.j2").write_text("x")
    (tmp_path / "bundle/__pycache__").mkdir()
    (tmp_path / "bundle/__pycache__/y.pyc").write_bytes(b"")
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/t.py").write_text("")
    assert shipped_files(tmp_path) == ["Dockerfile", "bundle/launch/x.j2"]
    write_repo_checksums(tmp_path)
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=tmp_path, capture_output=True)
    assert check.returncode == 0
    (tmp_path / "Dockerfile").write_text("FROM busybox\n")
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=tmp_path, capture_output=True)
    assert check.returncode != 0
