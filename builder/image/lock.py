"""The engine lock: vllm==0.33.0 and every dependency, one wheel per package, pinned by sha256.

A lock is a pip requirements file (`pip install --require-hashes --no-deps -r LOCK` installs it)
whose header comments say what it was resolved for. It is resolved by the platform's own pip,
inside the OS base of that platform (`builder base lock`), so environment markers are evaluated
for the real machine (QEMU user emulation for arm64 on an x86_64 host) and each hash names the
one wheel that pip picks there.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from pydantic import BaseModel, ConfigDict

from builder.errors import LockError
from builder.hashing import sha256_file

#: Header keys every lock carries, in the order they are written.
HEADER_KEYS = ("engine", "platform", "python", "os-base", "resolved-by")
_HEADER = re.compile(r"^# ([a-z-]+): (.+)$")
#: One pinned wheel: `name==version --hash=sha256:HEX`, then `  # file.whl` in an engine lock.
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})"
                    r"(?:\s+# (?P<file>\S+\.whl))?$")


class LockEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    sha256: str
    filename: str | None = None


def parse_entry(line: str) -> LockEntry | None:
    """One requirement line of a hash-pinned lock; None when it is not one."""
    m = _ENTRY.match(line.strip())
    if m is None:
        return None
    return LockEntry(name=m["name"], version=m["version"], sha256=m["sha"], filename=m["file"])


class EngineLock(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path
    digest: str  # "sha256:<hex>" of the file's bytes: what a target pins
    engine: str
    platform: str
    python: str
    os_base: str
    entries: tuple[LockEntry, ...]

    def entry(self, name: str) -> LockEntry | None:
        want = canonicalize_name(name)
        return next((e for e in self.entries if canonicalize_name(e.name) == want), None)


def lock_digest(path: Path) -> str:
    return "sha256:" + sha256_file(path)


def read_lock(path: Path) -> EngineLock:
    """Parse a lock; a malformed line is an error naming the line (pip would fail later, less clearly)."""
    if not path.is_file():
        raise LockError(f"engine lock {path} does not exist", hint="generate it with `builder base lock --platform P`")
    header: dict[str, str] = {}
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            m = _HEADER.match(line)
            if m and m[1] in HEADER_KEYS:
                header[m[1]] = m[2].strip()
            continue
        entry = parse_entry(line)
        if entry is None or entry.filename is None:
            raise LockError(
                f"{path}:{number}: not 'name==version --hash=sha256:<hex>  # <wheel>': {line[:120]}",
                hint="regenerate the lock with `builder base lock`; never edit it by hand",
            )
        entries.append(entry)
    missing = [k for k in HEADER_KEYS if k not in header]
    if missing:
        raise LockError(f"{path}: header lacks {', '.join(missing)}", hint="regenerate the lock with `builder base lock`")
    return EngineLock(
        path=path,
        digest=lock_digest(path),
        engine=header["engine"],
        platform=header["platform"],
        python=header["python"],
        os_base=header["os-base"],
        entries=tuple(entries),
    )


def render_lock(*, engine: str, platform: str, python: str, os_base: str, resolved_by: str, wheels: list[Path]) -> str:
    """The lock text for a set of resolved wheels (sorted by name, so a re-lock diffs cleanly)."""
    lines = [
        "# qfn-int8kv engine lock. Generated; do not edit (regenerate: builder base lock --platform " + platform + ").",
        "# Install: pip install --require-hashes --no-deps --only-binary=:all: -r <this file>",
        f"# engine: {engine}",
        f"# platform: {platform}",
        f"# python: {python}",
        f"# os-base: {os_base}",
        f"# resolved-by: {resolved_by}",
    ]
    rows = []
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        rows.append((canonicalize_name(name), f"{name}=={version} --hash=sha256:{sha256_file(wheel)}  # {wheel.name}"))
    names = [n for n, _ in rows]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise LockError(f"the resolution holds two wheels of {', '.join(dupes)}", hint="resolve into an empty directory")
    return "\n".join(lines + [row for _, row in sorted(rows)]) + "\n"
