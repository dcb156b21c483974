"""The bundle writer: exact contents, sha256sum-compatible manifest, atomic, never clobbers a non-bundle."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from rich.console import Console

from builder.atomic import STAGE_MARK
from builder.bundle import assemble, build_bundle, read_manifest, verify_bundle
from builder.config import config_digest, load_target
from builder.constants import REPO_ROOT
from builder.errors import BundleError, MeasureError, RenderError
from tests.evidence_fixtures import write_ledger

EXPECTED = [
    "CHECKSUMS.sha256",
    "README.md",
    "benchmark_vllm.py",
    "bundle.json",
    "evidence/bench-decode.json",
    "evidence/claims.toml",
    "evidence/golden_probes.json",
    "evidence/kernels/README.md",
    "evidence/kernels/int8_gpu_tests-h200.log",
    "launch/ENV.md",
    "launch/compose.yaml",
    "launch/k8s/deployment.yaml",
    "launch/k8s/service.yaml",
    "launch/qfn_stream_shutdown.py",
    "launch/run_qsa_int8kv.sh",
    "patches/qsa-int8.diff",
    "patches/qsa_reference.py",
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
        for n in ("qsa-int8.diff", "qsa_reference.py", "series")
    )
    assert m.patch_series_sha256 == hashlib.sha256(patch_lines.encode()).hexdigest()
    assert verify_bundle(root).ok


def test_kernel_evidence_only_travels_with_the_patch_series(tmp_path, sources, quiet):
    """cpu-smoke does not apply the series, so the H200 kernel results are not its evidence."""
    result = build_bundle(target="cpu-smoke", out=tmp_path / "cpu", sources=sources, console=quiet)
    assert not any(f.startswith("evidence/kernels/") for f in result.files)
    assert verify_bundle(result.path).ok


def test_a_bundle_ships_its_claims_files_and_no_other_targets(tmp_path, sources, quiet):
    """A claim may name several targets' image records; each bundle takes its own folder's files,
    and the ledger it ships names only what it ships, so `builder evidence check` holds inside."""
    from builder import evidence

    root = sources.evidence_root
    for t in ("gb10", "cmp170hx-x2"):
        (root / "images" / t).mkdir(parents=True)
        (root / "images" / t / "build.json").write_text(json.dumps({"size_gb": 9.5}))
    ledger = evidence.load_ledger(root)
    images = {"id": "images", "statement": "every image is {gb} GB", "targets": ["gb10", "cmp170hx-x2"],
              "files": ["images/gb10/build.json", "images/cmp170hx-x2/build.json"],
              "numbers": [{"name": "gb", "value": 9.5, "file": "images/gb10/build.json", "key": "size_gb"}]}
    write_ledger(root, *(c.model_dump() for c in ledger.claims), images)
    result = build_bundle(target="gb10", out=tmp_path / "b", sources=sources, console=quiet)
    shipped = {f for f in result.files if f.startswith("evidence/")}
    assert "evidence/images/gb10/build.json" in shipped and not any("cmp170hx-x2" in f for f in shipped)
    assert "evidence/notes-of-an-old-run.json" not in shipped  # in no claim
    ledger = evidence.load_ledger(result.path / "evidence")
    assert [c.id for c in ledger.claims] == ["gates", "kernel-tests", "images"]
    assert ledger.claims[2].files == ["images/gb10/build.json"]
    assert evidence.check(root=result.path / "evidence", readme=None) == []


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


def test_make_bundle_gb10_x2_ships_both_hosts_and_compares_with_gb10(tmp_path):
    out = tmp_path / "x2"
    make = subprocess.run(
        ["make", "-s", "bundle", "TARGET=gb10-x2", f"OUT={out}"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert make.returncode == 0, make.stdout + make.stderr
    launch = {p.relative_to(out).as_posix() for p in (out / "launch").rglob("*") if p.is_file()}
    assert {"launch/run_head.sh", "launch/run_worker.sh", "launch/qfn_cluster.py", "launch/compose.head.yaml",
            "launch/compose.worker.yaml", "launch/k8s/leaderworkerset.yaml", "launch/k8s/service.yaml"} <= launch
    assert "launch/compose.yaml" not in launch and "launch/k8s/deployment.yaml" not in launch
    card = (out / "README.md").read_text()
    assert "Against `gb10` (one host)" in card and "| pool on `gb10` | pool on `gb10-x2` |" in card
    assert "Head host" in card and "Worker host" in card and " worker\n" in card and " head\n" in card
    # The patch series' kernel evidence applies to this target as to gb10.
    assert (out / "evidence/kernels/qsa-int8-accuracy.json").is_file()


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize(("exc", "raised"), [(OSError("disk full"), BundleError), (KeyboardInterrupt(), KeyboardInterrupt)])
def test_interrupted_write_leaves_no_bundle(tmp_path, sources, quiet, monkeypatch, exc, raised):
    calls = []

    def failing_copy(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise exc
        return real_copy(src, dst)

    real_copy = assemble.copy_file
    monkeypatch.setattr(assemble, "copy_file", failing_copy)
    out = tmp_path / "dist" / "gb10"
    with pytest.raises(raised):
        build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    assert len(calls) == 2
    assert not out.exists()
    assert _leftovers(out.parent) == []


def test_failed_rebuild_keeps_the_previous_bundle(built, sources, quiet, monkeypatch):
    before = (built.path / "CHECKSUMS.sha256").read_text()
    monkeypatch.setattr(assemble, "copy_file", lambda src, dst: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(BundleError, match="disk full; nothing was replaced"):
        build_bundle(target="gb10", out=built.path, sources=sources, console=quiet)
    assert (built.path / "CHECKSUMS.sha256").read_text() == before
    assert verify_bundle(built.path).ok
    assert _leftovers(built.path.parent) == []


def test_rebuild_replaces_an_intact_bundle(built, sources, quiet):
    (built.path / "patches/series").unlink()  # a listed file that is gone loses nothing
    build_bundle(target="gb10", out=built.path, sources=sources, console=quiet)
    assert _tree(built.path) == EXPECTED
    assert _leftovers(built.path.parent) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: (r / "notes.txt").write_text("mine"), "does not list: notes.txt"),
        (lambda r: (r / "evidence/run2.json").write_text("{}"), "does not list: evidence/run2.json"),
        (lambda r: (r / "launch/ENV.md").write_text("my edits\n"), "changed since it was written: launch/ENV.md"),
        (lambda r: (r / "drafts").mkdir(), "does not list: drafts/"),
    ],
    ids=["added-file", "added-evidence", "edited-file", "added-empty-dir"],
)
def test_rebuild_refuses_a_bundle_the_user_added_to_or_changed(built, sources, quiet, run_cli, change, named):
    """A user's file in (or edit to) an earlier bundle is never dropped silently: the refusal names it."""
    change(built.path)
    before = _snapshot(built.path)
    with pytest.raises(BundleError, match="refusing to replace it") as err:
        build_bundle(target="gb10", out=built.path, sources=sources, console=quiet)
    assert named in err.value.message
    assert _snapshot(built.path) == before
    assert _leftovers(built.path.parent) == []


def _snapshot(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_folder_that_only_looks_like_a_bundle_is_not_replaced(tmp_path, sources, quiet):
    """The issue's reproduction: files merely named bundle.json and CHECKSUMS.sha256 prove nothing."""
    d = tmp_path / "d"
    d.mkdir()
    for name, text in (("bundle.json", "junk\n"), ("CHECKSUMS.sha256", "junk\n"), ("important.txt", "precious\n")):
        (d / name).write_text(text)
    with pytest.raises(BundleError) as err:
        build_bundle(target="gb10", out=d, sources=sources, console=quiet)
    assert "important.txt" in err.value.message and "refusing to replace it" in err.value.message
    assert (d / "important.txt").read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_folder_whose_manifest_lists_its_files_but_no_bundle_json_is_not_a_bundle(tmp_path, sources, quiet):
    d = tmp_path / "sums"
    d.mkdir()
    (d / "paper.pdf").write_bytes(b"%PDF")
    (d / "CHECKSUMS.sha256").write_text(f"{hashlib.sha256(b'%PDF').hexdigest()}  paper.pdf\n")
    with pytest.raises(BundleError, match="does not list bundle.json"):
        build_bundle(target="gb10", out=d, sources=sources, console=quiet)
    assert (d / "paper.pdf").read_bytes() == b"%PDF"


def test_refuses_to_overwrite_a_non_bundle(tmp_path, sources, quiet):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(BundleError, match="refusing to replace it"):
        build_bundle(target="gb10", out=mine, sources=sources, console=quiet)
    assert _tree(mine) == ["thesis.tex"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build_bundle(target="gb10", out=empty, sources=sources, console=quiet).path == empty
    with pytest.raises(BundleError, match="not a directory"):
        build_bundle(target="gb10", out=mine / "thesis.tex", sources=sources, console=quiet)


@pytest.mark.parametrize(
    "inside",
    [lambda s: s.patches_dir / "out", lambda s: s.evidence_root, lambda s: REPO_ROOT / "bundle/patches/out",
     lambda s: REPO_ROOT / "evidence/kernels/out", lambda s: REPO_ROOT / "targets/x", lambda s: REPO_ROOT / "builder"],
    ids=["test-patches", "test-evidence", "repo-patches", "repo-evidence", "targets", "builder"],
)
def test_out_inside_the_sources_is_refused(sources, quiet, inside):
    out = inside(sources)
    existed = out.exists()
    with pytest.raises(BundleError, match="which the bundle is made from; refusing to write there"):
        build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    assert out.exists() == existed
    assert not out.parent.exists() or not any(STAGE_MARK in p.name for p in out.parent.iterdir())


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
    assert code == BundleError.exit_code == 4 and "refusing to replace it" in " ".join(err.split())
    assert "a.txt" in err


def test_full_filesystem_is_a_clear_error_and_keeps_the_previous_bundle(tmpfs, sources, quiet, run_cli):
    out = tmpfs.path / "gb10"
    build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    before = _snapshot(out)
    tmpfs.remount(f"size={tmpfs.used_bytes() + 8192}")  # room for a few files, not for a second bundle
    with pytest.raises(BundleError) as err:
        build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    assert "No space left on device" in err.value.message and "nothing was replaced" in err.value.message
    assert "free space" in err.value.hint
    assert _snapshot(out) == before and verify_bundle(out).ok
    assert _leftovers(tmpfs.path) == []
    code, _, text = run_cli("bundle", "--target", "gb10", "--out", str(out))
    assert code == 4 and "No space left on device" in " ".join(text.split())


def test_read_only_filesystem_is_a_clear_error(tmpfs, sources, quiet, run_cli):
    out = tmpfs.path / "gb10"
    build_bundle(target="gb10", out=out, sources=sources, console=quiet)
    before = _snapshot(out)
    tmpfs.remount("ro")
    code, _, text = run_cli("bundle", "--target", "gb10", "--out", str(out))
    assert code == 4, text
    assert "Read-only file system" in text and "read-only" in text.split("fix:")[1]
    code, _, text = run_cli("bundle", "--target", "gb10", "--out", str(tmpfs.path / "new" / "gb10"))
    assert code == 4 and "Read-only file system" in text
    assert _snapshot(out) == before


@pytest.mark.parametrize("rel", ["thesis.tex/gb10", "thesis.tex/sub/gb10"])
def test_path_component_that_is_a_file_is_a_clear_error(tmp_path, run_cli, rel):
    (tmp_path / "thesis.tex").write_text("precious")
    code, _, text = run_cli("bundle", "--target", "gb10", "--out", str(tmp_path / rel))
    assert code == 4, text
    assert "is a file, not a folder" in " ".join(text.split())
    assert (tmp_path / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize(
    ("name", "data"),
    [("golden_probes.json", '{"gate": "golden_probes", "summary": "Gr\u00fc\u00dfe"}'.encode("latin-1")),
     ("battery.json", b"[" * 20000 + b"]" * 20000),
     ("bench-decode.json", b"\xff\xfe{"),
     ("bench-prefill.json", b"[" * 20000 + b"]" * 20000)],
    ids=["gate-latin1", "gate-deep", "bench-not-utf8", "bench-deep"],
)
def test_unreadable_evidence_is_a_clear_error_not_a_traceback(tmp_path, sources, name, data):
    """Evidence files are inputs like target files: bad bytes or absurd nesting name the file."""
    (sources.evidence_root / "gb10" / name).write_bytes(data)
    with pytest.raises((MeasureError, RenderError), match=f"gb10/{name}: not valid JSON"):
        build_bundle(target="gb10", out=tmp_path / "out", sources=sources, console=Console(quiet=True))
    assert not (tmp_path / "out").exists()
