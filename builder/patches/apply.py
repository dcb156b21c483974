"""Dry-run and apply the series with GNU patch, reporting per patch and per file.

``check_series`` applies the whole series, in order, to a scratch copy of the
files it touches, so later patches are checked against the earlier ones'
results and the target is never modified. ``apply_series`` runs that check
first and refuses to touch the target if anything fails.
"""

from __future__ import annotations

import importlib.util
import py_compile
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from pydantic import BaseModel

from builder.constants import PATCHES_DIR
from builder.errors import PatchError
from builder.hashing import sha256_file
from builder.patches.series import (
    NEW_FILE,
    Patch,
    PatchedFile,
    load_series,
)

_FAILED_HUNK = re.compile(r"Hunk #(\d+) FAILED at (\d+)")


class FileStatus(str, Enum):
    CLEAN = "applies cleanly"
    ALREADY = "already applied"
    FAILS = "fails"


class FileResult(BaseModel):
    patch: str
    path: str
    status: FileStatus
    upstream_matches: bool  # the target file's sha256 equals the header's
    detail: str = ""


class SeriesReport(BaseModel):
    target: Path
    results: list[FileResult]

    @property
    def ok(self) -> bool:
        return all(r.status != FileStatus.FAILS for r in self.results)


def _patch_bin() -> str:
    found = shutil.which("patch")
    if found is None:
        raise PatchError("GNU patch is not installed", hint="apt-get install patch")
    return found


def run_patch(root: Path, section: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_patch_bin(), "-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-r", "-", "-d", str(root), *extra],
        input=section,
        capture_output=True,
        text=True,
        check=False,
    )


def _hunk_headers(section: str) -> list[str]:
    return [line.rstrip("\n") for line in section.splitlines() if line.startswith("@@")]


def _failure_detail(section: str, output: str) -> str:
    headers = _hunk_headers(section)
    failed = []
    for number, line in _FAILED_HUNK.findall(output):
        index = int(number) - 1
        header = headers[index] if index < len(headers) else "?"
        failed.append(f"hunk #{number} ({header}) failed at line {line}")
    if failed:
        return "; ".join(failed)
    return " ".join(output.split())[:300] or "patch refused the section"


def _check_file(scratch: Path, patch: Patch, entry: PatchedFile) -> FileResult:
    path = scratch / entry.path
    if path.is_file():
        matches = entry.upstream_sha256 != NEW_FILE and sha256_file(path) == entry.upstream_sha256
    else:
        matches = entry.upstream_sha256 == NEW_FILE
        if not matches:
            return FileResult(patch=patch.name, path=entry.path, status=FileStatus.FAILS, upstream_matches=False, detail="file is missing from the target")
    forward = run_patch(scratch, entry.section, "--forward", "--dry-run")
    if forward.returncode == 0:
        run_patch(scratch, entry.section, "--forward")  # later patches build on it
        detail = "" if matches else "upstream sha256 differs from the header; context still matches"
        return FileResult(patch=patch.name, path=entry.path, status=FileStatus.CLEAN, upstream_matches=matches, detail=detail)
    if path.is_file() and run_patch(scratch, entry.section, "--reverse", "--dry-run").returncode == 0:
        return FileResult(patch=patch.name, path=entry.path, status=FileStatus.ALREADY, upstream_matches=matches)
    return FileResult(
        patch=patch.name,
        path=entry.path,
        status=FileStatus.FAILS,
        upstream_matches=matches,
        detail=_failure_detail(entry.section, forward.stdout + forward.stderr),
    )


def _scratch_copy(target: Path, patches: list[Patch], scratch: Path) -> None:
    for patch in patches:
        for entry in patch.files:
            source = target / entry.path
            if source.is_file():
                dest = scratch / entry.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest)


def check_series(*, target: Path, patches_dir: Path) -> SeriesReport:
    """Dry-run every patch of the series against ``target`` (never modified)."""
    if not target.is_dir():
        raise PatchError(f"target {target} is not a directory", hint="pass the unpacked engine or a site-packages folder holding vllm/")
    patches = load_series(patches_dir)
    results = []
    with tempfile.TemporaryDirectory(prefix="qfn-patch-check-") as tmp:
        scratch = Path(tmp)
        _scratch_copy(target, patches, scratch)
        for patch in patches:
            for entry in patch.files:
                results.append(_check_file(scratch, patch, entry))
    return SeriesReport(target=target, results=results)


def check_engine(
    *, target: Path | None = None, patches_dir: Path = PATCHES_DIR, show: Callable[[SeriesReport], None] | None = None
) -> SeriesReport:
    """Check the series against ``target`` or, by default, the cached 0.33.0 sources
    (downloaded and verified first if absent). ``show`` sees the report before a
    failure raises PatchError."""
    if target is None:
        from builder.patches.engine import fetch_engine

        target = fetch_engine().src_dir
    report = check_series(target=target, patches_dir=patches_dir)
    if show is not None:
        show(report)
    if not report.ok:
        failed = [f"{r.patch}: {r.path}: {r.detail}" for r in report.results if r.status == FileStatus.FAILS]
        raise PatchError(
            f"{len(failed)} file(s) of the series fail against {target}:\n  " + "\n  ".join(failed),
            hint="refresh the series against the pinned engine (`builder patches refresh`)",
        )
    return report


class ApplyReport(BaseModel):
    check: SeriesReport
    applied: list[str]  # "patch:path" sections written to the target
    compiled: list[Path]

    def written_files(self, target: Path) -> list[str]:
        """Every file the series owns in ``target`` (sources and their byte-code), relative to it:
        what an image layer needs to carry the patched engine."""
        out: list[str] = []
        for path in self.compiled:
            for f in (path, Path(importlib.util.cache_from_source(str(path)))):
                rel = str(f.relative_to(target))
                if rel not in out:
                    out.append(rel)
        return out


def apply_series(
    *, target: Path, patches_dir: Path = PATCHES_DIR, show: Callable[[SeriesReport], None] | None = None
) -> ApplyReport:
    """Check (dry run), then apply every section not yet applied, then byte-compile the
    patched files. Nothing is written if any file fails the check."""
    if not target.is_dir():
        raise PatchError(f"--to {target} is not a directory", hint="pass a site-packages folder or an unpacked engine holding vllm/")
    report = check_engine(target=target, patches_dir=patches_dir, show=show)
    applied = []
    touched = []
    for patch in load_series(patches_dir):
        for entry in patch.files:
            touched.append(target / entry.path)
            status = next(r.status for r in report.results if r.patch == patch.name and r.path == entry.path)
            if status != FileStatus.CLEAN:
                continue
            result = run_patch(target, entry.section, "--forward")
            if result.returncode != 0:
                raise PatchError(f"{patch.name}: {entry.path}: {_failure_detail(entry.section, result.stdout + result.stderr)}", hint="the target changed during apply; rerun on a clean copy")
            applied.append(f"{patch.name}:{entry.path}")
    compiled = []
    for path in touched:
        try:
            py_compile.compile(str(path), doraise=True)
        except py_compile.PyCompileError as exc:
            raise PatchError(f"{path} does not byte-compile after patching: {exc.msg}", hint="fix the diff and run `builder patches refresh`") from exc
        compiled.append(path)
    return ApplyReport(check=report, applied=applied, compiled=compiled)
