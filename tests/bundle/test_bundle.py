"""The bundle writer: exact contents, sha256sum-compatible manifest, atomic, never clobbers a non-bundle."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from builder.bundle import build_bundle, read_manifest, verify_bundle
from builder.bundle import assemble
from builder.config import config_digest, load_target
from builder.constants import REPO_ROOT
from builder.errors import BundleError

EXPECTED = [
    "CHECKSUMS.sha256",
    "README.md",
    "benchmark_vllm.py",
    "bundle.json",
    "evidence/bench-decode.json",
    "evidence/golden_probes.json",
    "evidence/kernels/int8_unit_test-h200.log",
    "launch/ENV.md",
    "launch/compose.yaml",
    "launch/qfn_stream_shutdown.py",
    "launch/run_qsa_int8kv.sh",
    "patches/int8_unit_test.py",
    "patches/qsa-int8.diff",
    "patches/series",
]


def _tree(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_contents_manifest_and_sha256sum(built):
    root = built.path
    assert _tree(root) == EXPECTED  # no caches, no other target's evidence
    assert "3/3 on gb10" in (root / "README.md").read_text()
    assert "812.2" in (root / "README.md").read_text()

    text = (root / "CHECKSUMS.sha256").read_bytes().decode()
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    assert [line.split("  ", 1)[1] for line in lines] == [p for p in EXPECTED if p != "CHECKSUMS.sha256"]
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=root, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (root / "launch/run_qsa_int8kv.sh").stat().st_mode & 0o111

    m = read_manifest(root)
    cfg = load_target("gb10")
    assert (m.target, m.engine_profile, m.kv_cache_dtype) == ("gb10", "vllm-0.33.0", "int8_per_token_head")
    assert m.config_digest == config_digest(cfg)
    patch_lines = "".join(
        f"{hashlib.sha256((root / 'patches' / n).read_bytes()).hexdigest()}  {n}\n"
        for n in ("int8_unit_test.py", "qsa-int8.diff", "series")
    )
    assert m.patch_series_sha256 == hashlib.sha256(patch_lines.encode()).hexdigest()
    assert verify_bundle(root).ok


def test_kernel_evidence_only_travels_with_the_patch_series(tmp_path, sources, quiet):
    """cpu-smoke does not apply the series, so the H200 kernel results are not its evidence."""
    result = build_bundle(target="cpu-smoke", out=tmp_path / "cpu", sources=sources, console=quiet)
    assert not any(f.startswith("evidence/kernels/") for f in result.files)
    assert verify_bundle(result.path).ok


def test_make_bundle_cmp170hx_passes_sha256sum_inside(tmp_path):
    out = tmp_path / "cmp"
    make = subprocess.run(
        ["make", "-s", "bundle", "TARGET=cmp170hx-x2", f"OUT={out}"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert make.returncode == 0, make.stdout + make.stderr
    check = subprocess.run(["sha256sum", "-c", "--strict", "CHECKSUMS.sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "--tensor-parallel-size 2" in (out / "launch/run_qsa_int8kv.sh").read_text()
    assert read_manifest(out).target == "cmp170hx-x2"


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("exc", [OSError("disk full"), KeyboardInterrupt()])
def test_interrupted_write_leaves_no_bundle(tmp_path, sources, quiet, monkeypatch, exc):
    calls = []

    def failing_copy(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise exc
        return real_copy(src, dst)

    real_copy = assemble.copy_file
    monkeypatch.setattr(assemble, "copy_file", failing_copy)
    out = tmp_path / "dist" / "gb10"
    with pytest.raises(type(exc)):
        build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    assert len(calls) == 2
    assert not out.exists()
    assert _leftovers(out.parent) == []


def test_failed_rebuild_keeps_the_previous_bundle(built, sources, quiet, monkeypatch):
    before = (built.path / "CHECKSUMS.sha256").read_text()
    monkeypatch.setattr(assemble, "copy_file", lambda src, dst: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        build_bundle(target="gb10", out=built.path, sources=sources, console=quiet)
    assert (built.path / "CHECKSUMS.sha256").read_text() == before
    assert verify_bundle(built.path).ok
    assert _leftovers(built.path.parent) == []


def test_rebuild_replaces_a_bundle(built, sources, quiet):
    (built.path / "stale.txt").write_text("x")  # a tampered earlier bundle is still a bundle
    build_bundle(target="gb10", out=built.path, sources=sources, console=quiet)
    assert _tree(built.path) == EXPECTED
    assert _leftovers(built.path.parent) == []


def test_refuses_to_overwrite_a_non_bundle(tmp_path, sources, quiet):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(BundleError, match="not a bundle; refusing to overwrite"):
        build_bundle(target="gb10", out=mine, sources=sources, console=quiet)
    assert _tree(mine) == ["thesis.tex"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build_bundle(target="gb10", out=empty, sources=sources, console=quiet).path == empty
    with pytest.raises(BundleError, match="not a directory"):
        build_bundle(target="gb10", out=mine / "thesis.tex", sources=sources, console=quiet)


def test_symlink_in_sources_is_refused(tmp_path, sources, quiet):
    (sources.patches_dir / "link.diff").symlink_to(sources.patches_dir / "qsa-int8.diff")
    out = tmp_path / "out"
    with pytest.raises(BundleError, match="symlink"):
        build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    assert not out.exists()


def test_cli_errors_exit_with_their_codes(tmp_path, run_cli):
    code, _, err = run_cli("bundle", "--target", "gb11", "--out", str(tmp_path / "x"))
    assert code == 2 and "not found" in err and not (tmp_path / "x").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("a")
    code, _, err = run_cli("bundle", "--target", "h200", "--out", str(tmp_path / "mine"))
    assert code == BundleError.exit_code == 4 and "refusing to overwrite" in " ".join(err.split())
