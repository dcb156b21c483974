"""Verify the bundle, then build and re-verify the staged copy that is uploaded (with the public
key beside a signed bundle, or with warnings on the card), so what is uploaded always matches the
CHECKSUMS.sha256 and the signature uploaded with it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import ModelCard

from builder import constants
from builder.bundle import BundleManifest, verify_bundle
from builder.checksums import list_files, manifest_text, read_manifest_file
from builder.hashing import sha256_file
from builder.errors import UnverifiedBundle, VerifyError
from builder.bundle.sign import check_signature
from builder.publish.card import load_card, notes_failed_gates, warn_failed_gates, warn_unsigned
from builder.bundle.gates import GateReport
from builder.publish.models import PlannedFile
from builder.publish.signature import Signing


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
def upload_source(bundle_dir: Path, *, card: ModelCard, report: GateReport, signing: Signing) -> Iterator[Path]:
    """Yield the directory to upload: a temp copy of the verified bundle (removed afterwards).

    Signed: the copy adds the public key as signing-key.pub, and its signature is checked again.
    Unsigned (--allow-unsigned): the copy drops any model.sig, which does not verify. When gates did
    not pass or it is unsigned, its card carries the warnings at the top, its CHECKSUMS.sha256 is
    rewritten over the same listed files, and it passes verification again."""
    with tempfile.TemporaryDirectory(prefix="qfn-publish-") as tmp:
        staged = Path(tmp) / bundle_dir.name
        shutil.copytree(bundle_dir, staged, symlinks=True)
        warn_gates = not report.ok and not notes_failed_gates(card)
        if warn_gates or not signing.signed:
            checksums = staged / constants.CHECKSUMS_NAME
            marked = card
            if warn_gates:
                marked = warn_failed_gates(marked, report=report, bundle_checksums_sha256=sha256_file(checksums))
            if not signing.signed:
                (staged / constants.SIGNATURE_NAME).unlink(missing_ok=True)
                marked = warn_unsigned(marked, reason=signing.unsigned_reason or "no signature")
            (staged / constants.CARD_NAME).write_text(str(marked), encoding="utf-8", newline="\n")
            listed = [e.path for e in read_manifest_file(checksums)]
            checksums.write_text(manifest_text(staged, listed), encoding="utf-8", newline="\n")
            load_card(staged / constants.CARD_NAME)
        verified(staged)
        if signing.signed and signing.public_key is not None:  # signed means it was checked against that key
            shutil.copyfile(signing.public_key, staged / constants.PUBLIC_KEY_NAME)
            # What is uploaded is what a user checks: the signature over the copy, key file beside it.
            check = check_signature(staged, public_key=staged / constants.PUBLIC_KEY_NAME)
            if not check.ok:
                raise UnverifiedBundle(f"{bundle_dir}: the staged upload does not verify: {check.detail}",
                                       hint="rebuild and sign the bundle again")
        yield staged
