"""Check a bundle against its CHECKSUMS.sha256.

API contract (the publish step relies on it):

    report = verify_bundle(path)     # raises MalformedManifest / UnsafeManifest when the
                                     # manifest cannot be trusted (absent, bad line, absolute
                                     # path, '..', any symlink in the bundle)
    report.ok                        # False when files were modified, are missing or unexpected
    report.raise_for_problems()      # raises ChecksumMismatch listing them; no-op when ok

All three errors are VerifyError subclasses with distinct exit codes (builder.errors).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from builder.bundle.checksums import list_files, parse_manifest
from builder.hashing import sha256_file
from builder.bundle.manifest import BundleManifest, read_manifest
from builder.constants import BUNDLE_MANIFEST_NAME, CHECKSUMS_NAME
from builder.errors import ChecksumMismatch, MalformedManifest, UnsafeManifest


class VerifyReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    root: Path
    checked: int = Field(description="Files listed in CHECKSUMS.sha256.")
    modified: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(default_factory=list, description="Files present but not listed.")
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
    root = Path(path)
    manifest_file = root / CHECKSUMS_NAME
    if manifest_file.is_symlink():
        raise UnsafeManifest(f"{manifest_file} is a symlink", hint="rebuild the bundle")
    if not manifest_file.is_file():
        raise MalformedManifest(
            f"{root} has no {CHECKSUMS_NAME}; it is not a bundle", hint="pass a folder written by `builder bundle`"
        )
    try:
        text = manifest_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedManifest(f"{manifest_file}: not UTF-8 text", hint="rebuild the bundle") from exc
    entries = parse_manifest(text, source=str(manifest_file))
    # Walks every file, caches included: anything not listed is unexpected; any symlink is unsafe.
    present = set(list_files(root, exclude_caches=False, symlink_error=UnsafeManifest)) - {CHECKSUMS_NAME}

    modified, missing = [], []
    for e in entries:
        if e.path not in present:
            missing.append(e.path)
        elif sha256_file(root / e.path) != e.sha256:
            modified.append(e.path)
    listed = {e.path for e in entries}
    bundle = None
    if BUNDLE_MANIFEST_NAME in listed and BUNDLE_MANIFEST_NAME in present and BUNDLE_MANIFEST_NAME not in modified:
        bundle = read_manifest(root)
    return VerifyReport(
        root=root,
        checked=len(entries),
        modified=sorted(modified),
        missing=sorted(missing),
        unexpected=sorted(present - listed),
        bundle=bundle,
    )
