"""What of a set of files the page cache holds, and dropping it: the A/B's cold arms start their
server with the checkpoint (which the PLE table maps in place) out of the page cache, so the first
requests read the table from disk as on a host that has just booted. No root needed: clean pages of
files no process maps are dropped with POSIX_FADV_DONTNEED. Standard library only (ctypes for mincore).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterable
from pathlib import Path

_PAGE = mmap.PAGESIZE


def files_under(*folders: Path) -> list[Path]:
    """Every regular file under the folders (links not followed), sorted."""
    return sorted(p for folder in folders if folder.is_dir() for p in folder.rglob("*")
                  if p.is_file() and not p.is_symlink())


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


def _resident_pages(libc: ctypes.CDLL, path: Path) -> tuple[int, int]:
    size = path.stat().st_size
    pages = (size + _PAGE - 1) // _PAGE
    if not size:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw), pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident(paths: Iterable[Path]) -> dict:
    """{"files", "bytes", "resident": share of their pages in the page cache} (mapping a file to ask
    faults nothing in)."""
    libc = _libc()
    held = total = files = size = 0
    for path in paths:
        h, t = _resident_pages(libc, path)
        held, total, files, size = held + h, total + t, files + 1, size + path.stat().st_size
    return {"files": files, "bytes": size, "resident": round(held / total, 4) if total else 0.0}


def evict(paths: Iterable[Path]) -> None:
    """Drop the files' pages from the page cache: written back first (dirty pages are not dropped),
    then advised away. Pages a running process maps stay: evict before the server starts."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
