"""Check a bundle against its CHECKSUMS.sha256.

API contract (the publish step relies on it):

    report = verify_bundle(path)     # raises MalformedManifest / UnsafeManifest when the
                                     # manifest cannot be trusted (absent, bad line, CRLF line
                                     # ending, absolute path, '..', any symlink, FIFO, socket
                                     # or device in the bundle)
    report.ok                        # False when files were modified, are missing or unexpected
                                     # (unlisted files, caches included, and empty folders)
    report.raise_for_problems()      # raises ChecksumMismatch listing them; no-op when ok

All three errors are VerifyError subclasses with distinct exit codes (builder.errors).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from builder.checksums import FolderCheck, check_folder, replace_refusal
from builder.bundle.manifest import BundleManifest, read_manifest
from builder.constants import BUNDLE_MANIFEST_NAME, CHECKSUMS_NAME
from builder.errors import ChecksumMismatch, MalformedManifest


class VerifyReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    root: Path
    checked: int = Field(description="Files listed in CHECKSUMS.sha256.")
    modified: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(
        default_factory=list, description="Files present but not listed, and empty folders (named 'path/')."
    )
    bundle: BundleManifest | None = Field(default=None, description="bundle.json, when listed and intact.")

    @property
    def ok(self) -> bool:
        return not (self.modified or self.missing or self.unexpected)

    def problems(self) -> list[tuple[str, str]]:
        """(kind, path) rows, for tables and messages."""
        return (
            [("modified", p) for p in self.modified]
            + [("missing", p) for p in self.missing]
            + [("unexpected", p) for p in self.unexpected]
        )

    def raise_for_problems(self) -> None:
        if self.ok:
            return
        shown = ", ".join(f"{kind} {path}" for kind, path in self.problems()[:10])
        more = len(self.problems()) - 10
        raise ChecksumMismatch(
            f"{self.root}: {len(self.modified)} modified, {len(self.missing)} missing, "
            f"{len(self.unexpected)} unexpected: {shown}{f' (+{more} more)' if more > 0 else ''}",
            hint="rebuild the bundle (`make bundle TARGET=<target>`); never edit a bundle by hand",
        )


def verify_bundle(path: Path) -> VerifyReport:
    check = check_folder(Path(path))
    return VerifyReport(
        root=check.root,
        checked=len(check.listed),
        modified=check.modified,
        missing=check.missing,
        unexpected=check.unexpected,
        bundle=_bundle_manifest(check),
    )


def _bundle_manifest(check: FolderCheck) -> BundleManifest | None:
    """bundle.json when it is listed and intact (MalformedManifest when it is, yet does not parse)."""
    name = BUNDLE_MANIFEST_NAME
    if name in check.listed and name not in check.missing and name not in check.modified:
        return read_manifest(check.root)
    return None


def bundle_refusal(root: Path) -> str | None:
    """Why `root` may not be replaced by a new bundle (None: an intact earlier bundle, nothing added)."""
    return replace_refusal(root, accept=_is_bundle)


def _is_bundle(check: FolderCheck) -> str | None:
    if BUNDLE_MANIFEST_NAME not in check.listed:
        return f"is not a bundle: its {CHECKSUMS_NAME} does not list {BUNDLE_MANIFEST_NAME}"
    if BUNDLE_MANIFEST_NAME in check.missing:
        return f"is not a bundle: its {BUNDLE_MANIFEST_NAME} is missing"
    try:
        _bundle_manifest(check)
    except MalformedManifest as exc:
        return f"is not a bundle ({exc.message})"
    return None
