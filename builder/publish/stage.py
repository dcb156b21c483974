"""Verify the bundle, and when the card must carry a failed-gates warning, build and re-verify a
staged copy, so what is uploaded always matches the CHECKSUMS.sha256 uploaded with it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from builder import constants
from builder.bundle import BundleManifest, verify_bundle
from builder.checksums import list_files, manifest_text, read_manifest_file
from builder.hashing import sha256_file
from builder.errors import UnverifiedBundle, VerifyError
from builder.publish.card import load_card, warn_failed_gates
from builder.publish.models import GateReport, PlannedFile


def verified(bundle_dir: Path) -> BundleManifest:
    """The bundle's manifest, once every file matches its CHECKSUMS.sha256; refuse otherwise."""
    if not bundle_dir.is_dir():
        raise UnverifiedBundle(f"{bundle_dir} is not a directory", hint="pass the directory `builder bundle --out` wrote")
    try:
        report = verify_bundle(bundle_dir)
        report.raise_for_problems()
    except VerifyError as exc:
        raise UnverifiedBundle(
            f"{bundle_dir} does not match its {constants.CHECKSUMS_NAME}; nothing was uploaded: {exc.message}",
            hint=exc.hint or "rebuild the bundle with `builder bundle`",
        ) from exc
    if report.bundle is None:
        raise UnverifiedBundle(
            f"{bundle_dir}: {constants.BUNDLE_MANIFEST_NAME} is not listed in {constants.CHECKSUMS_NAME}",
            hint="rebuild the bundle with `builder bundle`",
        )
    return report.bundle


def planned_files(root: Path) -> list[PlannedFile]:
    """Every file of a verified bundle (verification already refused symlinks and strays), sorted."""
    return [PlannedFile(path=rel, size=(root / rel).stat().st_size) for rel in list_files(root, exclude_caches=False)]


@contextmanager
def upload_source(bundle_dir: Path, *, report: GateReport) -> Iterator[Path]:
    """Yield the directory to upload: the verified bundle itself, or, when gates did not pass, a
    temp copy whose card carries the warning, whose CHECKSUMS.sha256 is rewritten over the same
    listed files, and which passes verification again. The copy is removed afterwards."""
    card = load_card(bundle_dir / constants.CARD_NAME)
    if report.ok:
        yield bundle_dir
        return
    with tempfile.TemporaryDirectory(prefix="qfn-publish-") as tmp:
        staged = Path(tmp) / bundle_dir.name
        shutil.copytree(bundle_dir, staged, symlinks=True)
        checksums = staged / constants.CHECKSUMS_NAME
        marked = warn_failed_gates(card, report=report, bundle_checksums_sha256=sha256_file(checksums))
        (staged / constants.CARD_NAME).write_text(str(marked), encoding="utf-8", newline="\n")
        listed = [e.path for e in read_manifest_file(checksums)]
        checksums.write_text(manifest_text(staged, listed), encoding="utf-8", newline="\n")
        verified(staged)
        load_card(staged / constants.CARD_NAME)
        yield staged
