"""Bundle: assemble a target's release folder, checksum it, verify it; the repo's source checksums."""

from builder.bundle.assemble import BundleResult, BundleSources, build_bundle
from builder.bundle.manifest import BundleManifest, read_manifest
from builder.bundle.repo import repo_manifest_text, shipped_files, write_repo_checksums
from builder.bundle.verify import VerifyReport, bundle_refusal, replace_refusal, verify_bundle

__all__ = [
    "BundleManifest",
    "BundleResult",
    "BundleSources",
    "VerifyReport",
    "build_bundle",
    "bundle_refusal",
    "read_manifest",
    "replace_refusal",
    "repo_manifest_text",
    "shipped_files",
    "verify_bundle",
    "write_repo_checksums",
]
