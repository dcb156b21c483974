"""Verify the bundle, and when the card must carry a failed-gates warning, build and re-verify a
staged copy, so what is uploaded always matches the CHECKSUMS.sha256 uploaded with it."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from builder import constants
from builder.bundle import verify_bundle
from builder.errors import UnverifiedBundle, VerifyError
from builder.publish.card import load_card, warn_failed_gates
from builder.publish.models import GateReport, PlannedFile, ReleaseInfo

README_NAME = "README.md"


def verified(bundle_dir: Path) -> None:
    """Refuse a bundle whose files do not match its CHECKSUMS.sha256."""
    if not bundle_dir.is_dir():
        raise UnverifiedBundle(f"{bundle_dir} is not a directory", hint="pass the directory `builder bundle --out` wrote")
    try:
        verify_bundle(bundle_dir).raise_for_problems()
    except VerifyError as exc:
        raise UnverifiedBundle(
            f"{bundle_dir} does not match its {constants.CHECKSUMS_NAME}; nothing was uploaded: {exc.message}",
            hint=exc.hint or "rebuild the bundle with `builder bundle`",
        ) from exc


def read_release(bundle_dir: Path) -> ReleaseInfo:
    path = bundle_dir / constants.BUNDLE_MANIFEST_NAME
    try:
        return ReleaseInfo.model_validate_json(path.read_bytes())
    except FileNotFoundError as exc:
        raise UnverifiedBundle(f"{path} is missing", hint="rebuild the bundle with `builder bundle`") from exc
    except (ValidationError, json.JSONDecodeError) as exc:
        raise UnverifiedBundle(f"{path}: not a bundle manifest: {exc}", hint="rebuild the bundle with `builder bundle`") from exc


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def list_files(root: Path) -> list[PlannedFile]:
    """Every file of a verified bundle (verification already refused symlinks and strays), sorted."""
    return [
        PlannedFile(path=p.relative_to(root).as_posix(), size=p.stat().st_size)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]


@contextmanager
def upload_source(bundle_dir: Path, *, report: GateReport) -> Iterator[Path]:
    """Yield the directory to upload: the verified bundle itself, or, when gates did not pass, a
    temp copy whose card carries the warning, whose README line in CHECKSUMS.sha256 is re-hashed,
    and which passes verification again. The copy is removed afterwards."""
    card = load_card(bundle_dir / README_NAME)
    if report.ok:
        yield bundle_dir
        return
    with tempfile.TemporaryDirectory(prefix="qfn-publish-") as tmp:
        staged = Path(tmp) / bundle_dir.name
        shutil.copytree(bundle_dir, staged, symlinks=True)
        marked = warn_failed_gates(card, report=report, bundle_checksums_sha256=sha256_file(bundle_dir / constants.CHECKSUMS_NAME))
        readme = staged / README_NAME
        readme.write_text(str(marked), encoding="utf-8", newline="\n")
        _rehash_entry(staged / constants.CHECKSUMS_NAME, README_NAME, sha256_file(readme))
        verified(staged)
        load_card(readme)
        yield staged


def _rehash_entry(manifest: Path, relpath: str, digest: str) -> None:
    """Replace one entry's digest; every other line stays byte-identical."""
    lines = manifest.read_text(encoding="utf-8").splitlines()
    hits = [i for i, line in enumerate(lines) if line.partition("  ")[2] == relpath]
    if len(hits) != 1:
        raise UnverifiedBundle(f"{manifest} lists {relpath} {len(hits)} times", hint="rebuild the bundle with `builder bundle`")
    lines[hits[0]] = f"{digest}  {relpath}"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")
