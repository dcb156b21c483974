"""`builder verify` catches every tamper kind, each with its own exit code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from builder.bundle import verify_bundle
from builder.checksums import list_files, manifest_text
from builder.errors import ChecksumMismatch, MalformedManifest, UnsafeManifest

SHA = "0" * 64


def _append_line(root, line):
    with (root / "CHECKSUMS.sha256").open("a") as fh:
        fh.write(line + "\n")


def test_clean_bundle_verifies(built, run_cli):
    code, out, _ = run_cli("verify", str(built.path))
    assert code == 0 and "files match" in out
    report = verify_bundle(built.path)
    assert report.ok and report.bundle.target == "gb10"
    report.raise_for_problems()


@pytest.mark.parametrize(
    ("tamper", "kind", "path"),
    [
        (lambda r: (r / "launch/ENV.md").write_text("edited\n"), "modified", "launch/ENV.md"),
        (lambda r: (r / "patches/series").unlink(), "missing", "patches/series"),
        (lambda r: (r / "evidence/extra.json").write_text("{}"), "unexpected", "evidence/extra.json"),
        (lambda r: _write(r / "launch/__pycache__/x.pyc", ""),
         "unexpected", "launch/__pycache__/x.pyc"),
        (lambda r: (r / "evidence/empty").mkdir(), "unexpected", "evidence/empty/"),
        (lambda r: (r / "a/b").mkdir(parents=True), "unexpected", "a/b/"),
    ],
    ids=["modified", "missing", "unexpected", "unexpected-cache", "empty-dir", "nested-empty-dir"],
)
def test_content_tamper(built, run_cli, tamper, kind, path):
    tamper(built.path)
    report = verify_bundle(built.path)
    assert not report.ok and report.problems() == [(kind, path)]
    with pytest.raises(ChecksumMismatch, match=re.escape(f"{kind} {path}")):
        report.raise_for_problems()
    code, out, err = run_cli("verify", str(built.path))
    assert code == ChecksumMismatch.exit_code == 11
    assert kind in out and path in out
    assert "rebuild the bundle" in " ".join(err.split())


def _symlink_listed_file(root):
    target = root / "launch/ENV.md"
    keep = root.parent / "ENV.md.outside"
    shutil.copy(target, keep)  # same bytes: only the link itself can give it away
    target.unlink()
    os.symlink(keep, target)


def _symlink_dir(root):
    shutil.move(root / "patches", root.parent / "patches.outside")
    os.symlink(root.parent / "patches.outside", root / "patches")


def _to_crlf(root):
    """The manifest as a Windows checkout (git core.autocrlf) leaves it; sha256sum 9.x accepts it."""
    path = root / "CHECKSUMS.sha256"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def _fifo(root):
    """A FIFO listed with some hash: `sha256sum -c` blocks reading it; verify must not open it."""
    os.mkfifo(root / "launch/pipe")
    _append_line(root, f"{SHA}  launch/pipe")


@pytest.mark.parametrize(
    ("tamper", "exc", "message"),
    [
        (lambda r: _append_line(r, f"{SHA}  /etc/passwd"), UnsafeManifest, "absolute path"),
        (lambda r: _append_line(r, f"{SHA}  ../outside"), UnsafeManifest, "'..'"),
        (lambda r: _append_line(r, f"{SHA}  launch/../../outside"), UnsafeManifest, "'..'"),
        (_symlink_listed_file, UnsafeManifest, "symlink"),
        (_symlink_dir, UnsafeManifest, "symlink"),
        (lambda r: _append_line(r, "not a checksum line"), MalformedManifest, "not '<sha256>  <path>'"),
        (lambda r: _append_line(r, f"{SHA}  README.md"), MalformedManifest, "listed twice"),
        (lambda r: (r / "CHECKSUMS.sha256").unlink(), MalformedManifest, "no CHECKSUMS.sha256"),
        (lambda r: _rehash(r, bundle_json="{}"), MalformedManifest, "bundle manifest"),
        (_to_crlf, MalformedManifest, "CRLF line ending"),
        (_fifo, UnsafeManifest, "not a regular file"),
    ],
    ids=["absolute", "dotdot", "dotdot-inner", "symlink-file", "symlink-dir", "bad-line", "duplicate",
         "no-manifest", "bad-bundle-json", "crlf", "fifo"],
)
def test_manifest_tamper(built, run_cli, tamper, exc, message):
    tamper(built.path)
    with pytest.raises(exc, match=message):
        verify_bundle(built.path)
    code, _, err = run_cli("verify", str(built.path))
    assert code == exc.exit_code
    assert " ".join(message.split()) in " ".join(err.split())  # rich may wrap long lines


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _rehash(root, *, bundle_json):
    """A bundle.json that is broken yet listed with its right checksum."""
    (root / "bundle.json").write_text(bundle_json)
    (root / "CHECKSUMS.sha256").write_text(manifest_text(root, [p for p in list_files(root) if p != "CHECKSUMS.sha256"]))


def test_exit_codes_are_distinct():
    assert len({ChecksumMismatch.exit_code, UnsafeManifest.exit_code, MalformedManifest.exit_code}) == 3


def test_json_report(built, run_cli):
    (built.path / "README.md").write_text("edited")
    code, out, _ = run_cli("verify", "--json", str(built.path))
    assert code == 11 and '"modified": [\n    "README.md"\n  ]' in out


def test_crlf_manifest_is_refused_although_sha256sum_accepts_it(built):
    """The two checks differ here on purpose (README, Verify): say so by testing both."""
    _to_crlf(built.path)
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=built.path, capture_output=True)
    assert check.returncode == 0
    with pytest.raises(MalformedManifest, match=r"CHECKSUMS.sha256:1: CRLF line ending"):
        verify_bundle(built.path)


def test_empty_directory_is_unexpected_although_sha256sum_passes(built):
    (built.path / "launch/drafts").mkdir()
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=built.path, capture_output=True)
    assert check.returncode == 0
    assert verify_bundle(built.path).problems() == [("unexpected", "launch/drafts/")]
