"""`builder verify` catches every tamper kind, each with its own exit code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from builder.bundle import verify_bundle
from builder.checksums import list_files, manifest_text
from builder.errors import ChecksumMismatch, ManifestClaimMismatch, MalformedManifest, UnsafeManifest, UnverifiedBundle
from builder.publish.stage import verified

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


def _rehash(root, *, bundle_json=None):
    """CHECKSUMS.sha256 written anew over the bundle as it now is (with `bundle_json` as bundle.json)."""
    if bundle_json is not None:
        (root / "bundle.json").write_text(bundle_json)
    (root / "CHECKSUMS.sha256").write_text(manifest_text(root, [p for p in list_files(root) if p != "CHECKSUMS.sha256"]))


def test_exit_codes_are_distinct():
    codes = {ChecksumMismatch.exit_code, UnsafeManifest.exit_code, MalformedManifest.exit_code, ManifestClaimMismatch.exit_code}
    assert len(codes) == 4


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


# --- bundle.json's claims: a bundle edited and then re-hashed matches its checksums, not its manifest


def _edit_json(root, **changes):
    data = json.loads((root / "bundle.json").read_text()) | changes
    (root / "bundle.json").write_text(json.dumps(data, indent=2) + "\n")


def _edit_patch(root):
    path = root / "patches/qsa-int8.diff"
    path.write_text(path.read_text().replace("+b", "+c"))


@pytest.mark.parametrize(
    ("tamper", "claim", "path"),
    [
        (_edit_patch, "patch_series_sha256", "patches/"),
        (lambda r: (r / "patches/qsa_reference.py").unlink(), "patch_series_sha256", "patches/"),
        (lambda r: _edit_json(r, patch_series_sha256="0" * 64), "patch_series_sha256", "patches/"),
        (lambda r: _edit_json(r, patch_series_sha256=None), "patch_series_sha256", "patches/"),
        (lambda r: _edit_json(r, target="h200"), "target", "launch/run_qsa_int8kv.sh"),
        (lambda r: _edit_json(r, config_digest="sha256:" + "1" * 64), "config_digest", "launch/ENV.md"),
        (lambda r: _edit_json(r, bundle_version="9.9.9"), "bundle_version", "README.md"),
        (lambda r: _edit_json(r, kv_cache_dtype="fp8_e4m3"), "kv_cache_dtype", "launch/run_qsa_int8kv.sh"),
        (lambda r: _edit_json(r, engine_profile="vllm-fork-preview"), "engine_profile", "launch/run_qsa_int8kv.sh"),
        (lambda r: (r / "launch/ENV.md").unlink(), "files", "launch/ENV.md"),
        (lambda r: (r / "benchmark_vllm.py").unlink(), "files", "benchmark_vllm.py"),
        (lambda r: (r / "evidence/kernels/int8_gpu_tests-h200.log").unlink(), "files", "evidence/kernels/"),
        (lambda r: (r / "launch/extra.sh").write_text("echo\n"), "files", "launch/extra.sh"),
    ],
    ids=["patch-edited", "patch-removed", "series-digest-changed", "series-digest-dropped", "target", "config-digest",
         "builder-version", "kv-dtype", "engine", "file-removed", "top-file-removed", "evidence-file-removed",
         "file-added"],
)
def test_a_rehashed_bundle_fails_on_what_its_manifest_claims(built, run_cli, tamper, claim, path):
    tamper(built.path)
    _rehash(built.path)
    report = verify_bundle(built.path)
    assert not (report.modified or report.missing or report.unexpected)  # the checksums alone pass
    assert not report.ok and (claim, path) in [(c.claim, c.path) for c in report.claims]
    with pytest.raises(ManifestClaimMismatch, match=re.escape(f"claim {claim} {path}")):
        report.raise_for_problems()
    code, out, err = run_cli("verify", str(built.path))
    assert code == ManifestClaimMismatch.exit_code == 14
    assert f"claim {claim}" in out and path in out
    assert "rebuild the bundle" in " ".join(err.split())
    with pytest.raises(UnverifiedBundle, match=f"claim {claim}"):
        verified(built.path)  # publish refuses it too


def test_a_changed_target_is_named_in_every_file_that_states_it(built):
    _edit_json(built.path, target="h200")
    _rehash(built.path)
    found = {c.path: c.detail for c in verify_bundle(built.path).claims if c.claim == "target"}
    assert set(found) == {"README.md", "launch/ENV.md", "launch/run_qsa_int8kv.sh"}
    assert found["launch/ENV.md"] == "names gb10; bundle.json says h200"


def test_an_intact_bundle_holds_its_claims(built):
    report = verify_bundle(built.path)
    assert report.ok and report.claims == [] and report.bundle.patch_series_sha256 is not None
    verified(built.path)


def test_a_modified_file_is_not_named_again_as_a_claim(built):
    """Without re-hashing, an edited patch is a checksum problem (exit 11), not also a claim."""
    _edit_patch(built.path)
    report = verify_bundle(built.path)
    assert report.problems() == [("modified", "patches/qsa-int8.diff")]


# --- unreadable files: root may read any file, so the CLI runs without the override (CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH) in a child; mode bits then bind root as any user, and a non-root run needs nothing.

_WITHOUT_OVERRIDE = """
import ctypes, runpy, sys
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
header, data = Header(0x20080522, 0), (Data * 2)()
keep = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
if libc.capget(ctypes.byref(header), data) != 0:
    sys.exit(99)
for field in ("effective", "permitted", "inheritable"):
    setattr(data[0], field, getattr(data[0], field) & keep)
if libc.capset(ctypes.byref(header), data) != 0:
    sys.exit(99)
sys.argv = ["builder", *sys.argv[1:]]
runpy.run_module("builder", run_name="__main__")
"""


def _verify_unprivileged(*args):
    run = subprocess.run([sys.executable, "-c", _WITHOUT_OVERRIDE, "verify", *args], capture_output=True, text=True,
                         timeout=120, env=os.environ | {"COLUMNS": "200"})
    if run.returncode == 99:
        pytest.skip("cannot drop the file-permission override (capset failed)")
    return run.returncode, run.stdout, " ".join(run.stderr.split())


@pytest.fixture
def unreadable():
    """chmod 000 on paths, restored afterwards so the temp folder can be removed by any user."""
    changed = []

    def make(path):
        changed.append((path, path.stat().st_mode))
        path.chmod(0)

    yield make
    for path, mode in reversed(changed):
        path.chmod(mode)


@pytest.mark.parametrize(
    ("rel", "row"),
    [("launch/ENV.md", "launch/ENV.md"), ("patches/series", "patches/series"), ("evidence/kernels", "evidence/kernels/")],
    ids=["file", "patch-file", "folder"],
)
def test_an_unreadable_file_is_a_problem_row(built, unreadable, rel, row):
    unreadable(built.path / rel)
    code, out, err = _verify_unprivileged("--json", str(built.path))
    assert code == ChecksumMismatch.exit_code == 11, err
    report = json.loads(out)
    assert report["unreadable"] == [row] and report["missing"] == [] and report["claims"] == []
    assert f"unreadable {row}" in err and "chmod u+r" in err and "Traceback" not in err
    code, out, _ = _verify_unprivileged(str(built.path))
    assert code == 11 and "unreadable" in out and row in out


@pytest.mark.parametrize("rel", ["CHECKSUMS.sha256", "bundle.json", "."], ids=["checksums", "bundle-json", "bundle-folder"])
def test_an_unreadable_manifest_is_malformed_and_named(built, unreadable, rel):
    target = built.path / rel
    unreadable(target)
    code, _, err = _verify_unprivileged(str(built.path))
    assert code == MalformedManifest.exit_code == 13, err
    assert "Traceback" not in err and "cannot be read" in err
    assert f"chmod u+r{'x' if rel == '.' else ''} {target}" in err


def test_without_the_override_a_readable_bundle_still_verifies(built):
    """The control of the unreadable cases: the dropped override alone changes nothing."""
    code, out, err = _verify_unprivileged(str(built.path))
    assert code == 0 and "files match" in out, err
