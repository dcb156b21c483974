"""Write a whole directory or nothing, and replace only a directory we can prove we wrote.

A build runs in a staging folder beside the destination, ``.<name>.qfn-stage-<random>/``, holding
``owner.json`` (which run is building; flock-ed for as long as that run lives) and ``out/`` (the
new output). The swap, under a lock on the parent folder: check the destination again, move it to
``<stage>/old``, move ``<stage>/out`` into its place, then remove the stage. A run killed at any
point leaves only its stage folder; the next run for the same destination recognises it by its
unlocked owner file, puts a displaced earlier output back if the destination is gone, and removes
it. Folders it cannot prove are ours (no owner file, another host, unknown entries) are left alone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.errors import BuilderError

#: Says why `dest` may not be replaced (e.g. the files it holds that we did not write), or None when it may.
ReplaceCheck = Callable[[Path], "str | None"]

STAGE_MARK = ".qfn-stage-"
OWNER_FILE = "owner.json"
NEW, OLD = "out", "old"
_STAGE_ENTRIES = {OWNER_FILE, NEW, OLD}


class StageOwner(BaseModel):
    """owner.json: the run that made a staging folder, so a later run can tell it is ours and stale."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str = "qfn-int8kv builder"
    dest: str
    host: str
    pid: int
    started: datetime


@contextmanager
def replace_dir(
    dest: Path,
    *,
    replaceable: ReplaceCheck,
    what: str,
    error: type[BuilderError],
    refuse_inside: Sequence[Path] = (),
    notify: Callable[[str], None] = lambda _: None,
) -> Iterator[Path]:
    """Yield an empty folder to write the output into; on clean exit it replaces `dest` in one rename.

    `dest` may be absent, empty, or a folder `replaceable` accepts (an earlier output, nothing
    added or changed); anything else is refused naming what is in the way, before any work and
    again at the swap. A `dest` inside one of `refuse_inside` (the sources) is refused. On any
    exception nothing is replaced and the staging folder is removed; an OSError becomes `error`.
    """
    dest = Path(os.path.abspath(dest))
    try:
        _refuse_inside(dest, refuse_inside, what=what, error=error)
        _refuse_unless_replaceable(dest, replaceable, what=what, error=error)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _locked(dest.parent):
            for line in clean_stale_stages(dest, replaceable=replaceable):
                notify(line)
        stage = _Stage.create(dest)
        try:
            yield stage.new
            with _locked(dest.parent):
                _refuse_unless_replaceable(dest, replaceable, what=what, error=error)
                stage.swap_into(dest)
        finally:
            stage.remove()
    except OSError as exc:
        raise _os_error(exc, dest=dest, what=what, error=error) from exc


def _refuse_inside(dest: Path, protected: Sequence[Path], *, what: str, error: type[BuilderError]) -> None:
    real = Path(os.path.realpath(dest))
    for p in protected:
        root = Path(os.path.realpath(p))
        if real == root or root in real.parents:
            raise error(
                f"{dest} is inside {root}, which the {what} is made from; refusing to write there",
                hint="choose an --out outside the sources (e.g. dist/<target>)",
            )


def _refuse_unless_replaceable(dest: Path, replaceable: ReplaceCheck, *, what: str, error: type[BuilderError]) -> None:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise error(f"{dest} exists and is not a directory", hint="choose another --out")
    if not dest.is_dir() or not any(dest.iterdir()):
        return
    why = replaceable(dest)
    if why is not None:
        raise error(
            f"{dest} is not empty and {why}; refusing to replace it",
            hint=f"choose another --out, or move those files away (a {what} folder is replaced whole)",
        )


class _Stage:
    """A staging folder of this run: owner.json (held locked) and out/ (the output being written)."""

    def __init__(self, root: Path, owner_fd: int) -> None:
        self.root = root
        self.new = root / NEW
        self._owner_fd = owner_fd

    @classmethod
    def create(cls, dest: Path) -> _Stage:
        root = Path(tempfile.mkdtemp(prefix=f".{dest.name}{STAGE_MARK}", dir=dest.parent))
        owner = StageOwner(dest=str(dest), host=socket.gethostname(), pid=os.getpid(), started=datetime.now(timezone.utc))
        fd = None
        try:
            fd = os.open(root / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, (owner.model_dump_json() + "\n").encode())
            os.fsync(fd)
            stage = cls(root, fd)
            stage.new.mkdir()  # plain mkdir: the output gets the mode any folder of the user gets
        except BaseException:  # e.g. a full disk: take back the half-made stage, which nothing could prove ours
            if fd is not None:
                os.close(fd)
            shutil.rmtree(root, ignore_errors=True)
            raise
        return stage

    def swap_into(self, dest: Path) -> None:
        old = self.root / OLD
        if dest.exists():
            os.rename(dest, old)
        try:
            os.rename(self.new, dest)
        except BaseException:
            if old.exists():
                os.rename(old, dest)
            raise

    def remove(self) -> None:
        """Outputs first, owner.json last: a removal cut short still leaves a stage we can prove is ours."""
        try:
            for name in (NEW, OLD):
                shutil.rmtree(self.root / name, ignore_errors=True)
            if any(os.path.lexists(self.root / name) for name in (NEW, OLD)):
                return  # could not remove it all: keep the owner file so a later run can
            with suppress(FileNotFoundError):
                os.unlink(self.root / OWNER_FILE)
            with suppress(OSError):
                self.root.rmdir()
        finally:
            os.close(self._owner_fd)


def clean_stale_stages(dest: Path, *, replaceable: ReplaceCheck) -> list[str]:
    """Remove staging folders of `dest` left by killed runs on this host; returns what was done.

    Call with the parent folder locked. A displaced earlier output is put back when `dest` is gone.
    """
    done = []
    for stage in sorted(dest.parent.glob(f".{_glob_escape(dest.name)}{STAGE_MARK}*")):
        owner_fd = _claim_stale(stage, dest)
        if owner_fd is None:
            continue
        old = stage / OLD
        try:
            if old.is_dir() and not os.path.lexists(dest):
                os.rename(old, dest)
                done.append(f"restored {dest} from a run that was killed while replacing it")
            elif old.is_dir() and replaceable(old) is not None:
                continue  # something was added to it since: not provably ours any more
            _Stage(stage, owner_fd).remove()
            owner_fd = None
            done.append(f"removed {stage.name}, left by a killed run")
        finally:
            if owner_fd is not None:
                os.close(owner_fd)
    return done


def _claim_stale(stage: Path, dest: Path) -> int | None:
    """The locked owner fd of a stage folder we wrote for `dest` whose run is gone, or None."""
    owner_file = stage / OWNER_FILE
    if stage.is_symlink() or not stage.is_dir() or owner_file.is_symlink() or not owner_file.is_file():
        return None
    if not {p.name for p in stage.iterdir()} <= _STAGE_ENTRIES:
        return None
    if any((stage / n).is_symlink() for n in (NEW, OLD)):
        return None
    try:
        owner = StageOwner.model_validate_json(owner_file.read_bytes())
    except (OSError, ValidationError):
        return None
    if owner.dest != str(dest) or owner.host != socket.gethostname():
        return None
    fd = os.open(owner_file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its run is still alive
        os.close(fd)
        return None
    return fd


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive flock on `folder`: one swap or clean-up at a time among runs writing into it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_OS_HINTS = {
    errno.ENOSPC: "free space on that filesystem, or choose an --out on another one",
    errno.EDQUOT: "free space within your quota, or choose an --out on another filesystem",
    errno.EROFS: "that filesystem is mounted read-only: choose an --out on a writable one",
    errno.EACCES: "you may not write there: choose another --out, or fix the folder's permissions",
    errno.EPERM: "you may not write there: choose another --out, or fix the folder's permissions",
    errno.ENOTDIR: "a component of that path is a file, not a folder: choose another --out",
    errno.EEXIST: "a component of that path is a file, not a folder: choose another --out",
    errno.ENAMETOOLONG: "choose a shorter --out",
}


def _os_error(exc: OSError, *, dest: Path, what: str, error: type[BuilderError]) -> BuilderError:
    where = f" ({exc.filename})" if exc.filename else ""
    reason = exc.strerror or str(exc)
    return error(
        f"the {what} was not written to {dest}: {reason}{where}; nothing was replaced",
        hint=_OS_HINTS.get(exc.errno or 0, "fix the cause named above, then run again"),
    )
