"""Write a whole directory or nothing: build beside the destination, then rename into place."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from builder.errors import BuilderError


@contextmanager
def replace_dir(
    dest: Path, *, replaceable: Callable[[Path], bool], what: str, error: type[BuilderError]
) -> Iterator[Path]:
    """Yield an empty staging dir beside `dest`; on clean exit it replaces `dest`, on any exception it is removed.

    `dest` may be absent, empty, or a directory `replaceable` accepts (an earlier output); anything
    else is refused so a user's files are never overwritten.
    """
    dest = Path(os.path.abspath(dest))
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise error(f"{dest} exists and is not a directory", hint="choose another --out")
    if dest.is_dir() and any(dest.iterdir()) and not replaceable(dest):
        raise error(
            f"{dest} is not empty and is not a {what}; refusing to overwrite it",
            hint="choose another --out, or remove that directory yourself",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield stage
        _chmod_like_mkdir(stage)
        _swap_into_place(stage, dest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _chmod_like_mkdir(path: Path) -> None:
    # mkdtemp makes 0700; the output should look like any directory the user creates.
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o777 & ~umask)


def _swap_into_place(stage: Path, dest: Path) -> None:
    if not dest.exists():
        os.rename(stage, dest)
        return
    old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(dest, old)
    try:
        os.rename(stage, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old)
