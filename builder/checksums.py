"""sha256 manifests in `sha256sum` format: one writer, one parser and one folder check for
bundles, render outputs and the repo.

Format: `<64 lowercase hex>  <relative posix path>\\n`, sorted by path, LF line endings, so that
`sha256sum -c --strict CHECKSUMS.sha256` run in the manifest's folder checks the listed files.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from builder.constants import CHECKSUMS_NAME, EXCLUDED_NAMES, EXCLUDED_SUFFIXES
from builder.errors import BuilderError, BundleError, MalformedManifest, UnsafeManifest, VerifyError
from builder.hashing import sha256_file

_LINE = re.compile(r"^(?P<sha>[0-9a-f]{64}) [ *](?P<path>.+)$")
#: sha256sum escapes names holding these; we never write such names, so a manifest never needs escapes.
_UNWRITABLE = ("\n", "\r", "\\")
#: How many file names a refusal lists.
_SHOWN = 10


class ChecksumEntry(BaseModel):
    model_config = ConfigDict(frozen=True)
    sha256: str
    path: str


def is_excluded(rel: PurePosixPath) -> bool:
    """Caches and editor/temp files are never shipped nor listed."""
    return any(part in EXCLUDED_NAMES for part in rel.parts) or rel.name.endswith(EXCLUDED_SUFFIXES)


def list_files(
    root: Path,
    *,
    exclude_caches: bool = True,
    symlink_error: type[BuilderError] = BundleError,
    unreadable: list[str] | None = None,
) -> list[str]:
    """Regular files under `root` as sorted relative posix paths; a symlink or special file is `symlink_error`.

    A folder that cannot be read (or an entry that cannot be stat'ed) is named in `unreadable`
    ('path/' for a folder) when a list is given, and is `symlink_error` otherwise: skipping it, as
    os.walk does by default, would silently leave its files out.
    """
    out = []
    seen: set[str] = set()

    def cannot_read(path: Path, exc: OSError, *, folder: bool) -> None:
        rel = Path(path).relative_to(root).as_posix() + ("/" if folder else "")
        if unreadable is None:
            raise symlink_error(
                f"{path} cannot be read ({exc.strerror})",
                hint=f"make it readable (`chmod u+r{'x' if folder else ''} {path}`) or remove it",
            )
        if rel not in seen:
            seen.add(rel)
            unreadable.append(rel)

    def walk_error(exc: OSError) -> None:
        cannot_read(Path(exc.filename), exc, folder=True)

    for dirpath, dirnames, filenames in os.walk(root, onerror=walk_error):
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = here / name
            rel = PurePosixPath(path.relative_to(root).as_posix())
            if exclude_caches and is_excluded(rel):
                continue
            try:
                mode = path.lstat().st_mode
            except OSError as exc:
                cannot_read(path, exc, folder=name in dirnames)
                continue
            if stat.S_ISLNK(mode):
                raise symlink_error(
                    f"{path} is a symlink; bundles and checksummed sources hold regular files only",
                    hint="replace the link with the file it points to, or remove it",
                )
            if name in filenames:
                if not stat.S_ISREG(mode):
                    raise symlink_error(f"{path} is not a regular file (fifo, socket or device)", hint="remove it")
                out.append(rel.as_posix())
        if exclude_caches:
            dirnames[:] = [d for d in dirnames if d not in EXCLUDED_NAMES]
    if unreadable is not None:
        unreadable.sort()
    return sorted(out)


def empty_dirs(root: Path) -> list[str]:
    """Folders under `root` with nothing in them, as 'path/': no manifest can list them, so verify names them."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if not dirnames and not filenames and Path(dirpath) != Path(root):
            out.append(Path(dirpath).relative_to(root).as_posix() + "/")
    return sorted(out)


def manifest_text(root: Path, rels: list[str]) -> str:
    lines = []
    for rel in sorted(rels):
        if any(c in rel for c in _UNWRITABLE):
            raise BundleError(f"file name {rel!r} holds a newline or backslash", hint="rename the file")
        lines.append(f"{sha256_file(root / rel)}  {rel}\n")
    return "".join(lines)


def tree_digest(root: Path) -> str | None:
    """sha256 of the manifest of every file under `root` (None when there are none): one id for a file set."""
    rels = list_files(root) if root.is_dir() else []
    if not rels:
        return None
    return hashlib.sha256(manifest_text(root, rels).encode()).hexdigest()


def check_safe_path(rel: str, *, source: str) -> None:
    p = PurePosixPath(rel)
    if p.is_absolute() or rel.startswith("/"):
        raise UnsafeManifest(f"{source}: absolute path {rel!r}", hint="manifests list paths relative to their folder")
    if ".." in p.parts:
        raise UnsafeManifest(f"{source}: path {rel!r} climbs out with '..'", hint="manifests list paths inside their folder")


def read_manifest_file(path: Path) -> list[ChecksumEntry]:
    """Entries of a manifest file, read as bytes: a CRLF line must reach the parser to be refused."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedManifest(f"{path}: not UTF-8 text", hint="rebuild the bundle") from exc
    except OSError as exc:
        raise MalformedManifest(
            f"{path} cannot be read ({exc.strerror})", hint=f"make it readable (`chmod u+r {path}`), or rebuild the bundle"
        ) from exc
    return parse_manifest(text, source=str(path))


def parse_manifest(text: str, *, source: str) -> list[ChecksumEntry]:
    """Entries of a manifest; a bad line is MalformedManifest, an absolute or '..' path UnsafeManifest."""
    entries: dict[str, ChecksumEntry] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        m = _LINE.match(line)
        if m is None:
            raise MalformedManifest(
                f"{source}:{n}: not '<sha256>  <path>': {line[:80]!r}",
                hint="rebuild the bundle; the manifest is written by the builder",
            )
        rel = m["path"]
        if "\r" in rel:
            raise MalformedManifest(
                f"{source}:{n}: CRLF line ending (the builder writes LF only, so the bundle was converted on the way, "
                "e.g. by git core.autocrlf)",
                hint="use the bundle as built (or re-download it without line-ending conversion), or rebuild it",
            )
        check_safe_path(rel, source=f"{source}:{n}")
        if rel in entries:
            raise MalformedManifest(f"{source}:{n}: {rel} is listed twice", hint="rebuild the bundle")
        entries[rel] = ChecksumEntry(sha256=m["sha"], path=rel)
    return list(entries.values())


class FolderCheck(BaseModel):
    """A folder compared with its CHECKSUMS.sha256."""

    model_config = ConfigDict(frozen=True)
    root: Path
    listed: list[str] = Field(description="Paths the manifest lists.")
    modified: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(
        default_factory=list, description="Files present but not listed, and empty folders (named 'path/')."
    )
    unreadable: list[str] = Field(
        default_factory=list,
        description="Listed files that cannot be read, and folders that cannot be read (named 'path/'); "
        "a listed file inside such a folder is not reported again.",
    )


def check_folder(root: Path, *, outside: tuple[str, ...] = ()) -> FolderCheck:
    """Compare `root` with its CHECKSUMS.sha256; MalformedManifest / UnsafeManifest when the manifest cannot be trusted.

    `outside`: top-level files written after the manifest (a bundle's signature), neither listed
    nor unexpected; they are still walked, so one that is a symlink is refused."""
    manifest_file = root / CHECKSUMS_NAME
    try:
        mode = manifest_file.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        # lstat needs only search permission on the folders above: the folder itself is at fault.
        raise MalformedManifest(
            f"{root} cannot be read ({exc.strerror}), so its {CHECKSUMS_NAME} cannot be reached",
            hint=f"make the folder readable (`chmod u+rx {root}`)",
        ) from exc
    if mode is not None and stat.S_ISLNK(mode):
        raise UnsafeManifest(f"{manifest_file} is a symlink", hint="rebuild the bundle")
    if mode is None or not stat.S_ISREG(mode):
        raise MalformedManifest(
            f"{root} has no {CHECKSUMS_NAME}; it is not a bundle", hint="pass a folder written by `builder bundle`"
        )
    entries = read_manifest_file(manifest_file)
    # Walks every file, caches included: anything not listed is unexpected; any symlink is unsafe.
    # Nothing is opened before that walk, so a FIFO is refused rather than read.
    unreadable: list[str] = []
    present = set(list_files(root, exclude_caches=False, symlink_error=UnsafeManifest, unreadable=unreadable))
    present -= {CHECKSUMS_NAME, *outside}
    # A folder that cannot be listed hides whether its files are there ('./': the bundle folder itself).
    hidden = tuple("" if u == "./" else u for u in unreadable if u.endswith("/"))
    modified, missing, unread = [], [], []
    for e in entries:
        if e.path not in present:
            # Inside a folder that cannot be read, a file can be neither found nor ruled out.
            if e.path not in unreadable and not e.path.startswith(hidden):
                missing.append(e.path)
            continue
        try:
            digest = sha256_file(root / e.path)
        except OSError:
            unread.append(e.path)
            continue
        if digest != e.sha256:
            modified.append(e.path)
    listed = [e.path for e in entries]
    unlisted = present - set(listed)
    return FolderCheck(
        root=root,
        listed=listed,
        modified=sorted(modified),
        missing=sorted(missing),
        unexpected=sorted(unlisted) + empty_dirs(root),
        unreadable=sorted(set(unread) | set(unreadable)),
    )


def replace_refusal(
    root: Path, *, accept: Callable[[FolderCheck], str | None], outside: tuple[str, ...] = ()
) -> str | None:
    """Why the non-empty folder `root` is not an output this builder wrote, or None when it is.

    It is ours when it matches its CHECKSUMS.sha256 with nothing added and nothing changed (a
    listed file that is missing loses nothing), and `accept` (the kind of output expected, e.g. a
    bundle) finds no fault with it.
    """
    try:
        check = check_folder(root, outside=outside)
    except VerifyError as exc:
        return f"is not an output of this builder ({exc.message}); it holds {folder_sample(root)}"
    if check.unreadable:
        return f"holds files that cannot be read, so it cannot be checked: {name_files(check.unreadable)}"
    if check.unexpected:
        return f"holds files its {CHECKSUMS_NAME} does not list: {name_files(check.unexpected)}"
    if check.modified:
        return f"holds files changed since it was written: {name_files(check.modified)}"
    return accept(check)


def folder_sample(root: Path) -> str:
    """Some of the files (and empty folders) under `root`, for a refusal that names what is there."""
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here != root and not dirnames and not filenames:
            names.append(here.relative_to(root).as_posix() + "/")
        names += [(here / n).relative_to(root).as_posix() for n in filenames]
        if len(names) > _SHOWN:
            break
    return name_files(sorted(names))


def name_files(paths: list[str]) -> str:
    more = f" (+{len(paths) - _SHOWN} more)" if len(paths) > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more
