"""The repo-level CHECKSUMS.sha256 over the shipped sources (constants.SHIPPED_SOURCES)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from builder.checksums import list_files, manifest_text
from builder.constants import CHECKSUMS_NAME, REPO_ROOT, SHIPPED_SOURCES


def shipped_files(root: Path = REPO_ROOT) -> list[str]:
    """Repo-relative paths of every shipped source file that exists now (caches excluded)."""
    out = []
    for name in SHIPPED_SOURCES:
        path = root / name
        if path.is_file():
            out.append(name)
        elif path.is_dir():
            out += [f"{name}/{rel}" for rel in list_files(path)]
    return sorted(out)


def repo_manifest_text(root: Path = REPO_ROOT) -> str:
    return manifest_text(root, shipped_files(root))


def write_repo_checksums(root: Path = REPO_ROOT) -> Path:
    """Rewrite <root>/CHECKSUMS.sha256 (temp file + rename, so a reader never sees half of it)."""
    dest = root / CHECKSUMS_NAME
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{CHECKSUMS_NAME}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(repo_manifest_text(root))
    os.chmod(tmp, 0o644)
    os.replace(tmp, dest)
    return dest
