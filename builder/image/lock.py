"""The engine lock: vllm==0.33.0 and every dependency, one wheel per package, pinned by sha256;
and add-on locks: packages a target needs beyond the engine (Ray), installed over it.

A lock is a pip requirements file (`pip install --require-hashes --no-deps -r LOCK` installs it)
whose header comments say what it was resolved for. It is resolved by the platform's own pip,
inside the OS base of that platform (`builder base lock`), so environment markers are evaluated
for the real machine (QEMU user emulation for arm64 on an x86_64 host) and each hash names the
one wheel that pip picks there.

An add-on lock is resolved against an engine lock, with every engine pin as a constraint, and holds
only the wheels the engine lock lacks; its header names that engine lock by digest, so the add-on is
installed only over the exact set of pins it was resolved with.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from builder.errors import LockError
from builder.hashing import sha256_file

#: Header keys every lock carries, in the order they are written.
HEADER_KEYS = ("engine", "platform", "python", "os-base", "resolved-by")
#: Header keys only an add-on lock carries: its requirement, and the engine lock (path@sha256) it extends.
ADDON_KEYS = ("addon", "engine-lock")
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
    addon: str | None = None
    """The add-on requirement (ray==2.60.0); None for an engine lock."""
    engine_lock: str | None = None
    """An add-on lock's engine lock, path@sha256:<digest>, whose pins it was resolved against."""

    def resolved_over(self, engine: EngineLock) -> bool:
        """Whether this is an add-on lock resolved over exactly ``engine`` (its header names that digest)."""
        return self.engine_lock is not None and self.engine_lock.rpartition("@")[2] == engine.digest

    def entry(self, name: str) -> LockEntry | None:
        want = canonicalize_name(name)
        return next((e for e in self.entries if canonicalize_name(e.name) == want), None)


def missing_wheels(lock: EngineLock, cache: Path) -> list[str]:
    """The file names of ``lock``'s wheels that ``cache`` lacks or holds with another sha256."""
    missing = []
    for e in lock.entries:
        path = cache / e.filename
        if not path.is_file() or sha256_file(path) != e.sha256:
            missing.append(e.filename)
    return missing


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
            if m and m[1] in HEADER_KEYS + ADDON_KEYS:
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
    if ("addon" in header) != ("engine-lock" in header):
        missing += [k for k in ADDON_KEYS if k not in header]
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
        addon=header.get("addon"),
        engine_lock=header.get("engine-lock"),
    )


def render_lock(
    *,
    engine: str,
    platform: str,
    python: str,
    os_base: str,
    resolved_by: str,
    wheels: list[Path],
    addon: str | None = None,
    engine_lock: str | None = None,
) -> str:
    """The lock text for a set of resolved wheels (sorted by name, so a re-lock diffs cleanly); with
    ``addon`` and ``engine_lock``, an add-on lock over that engine lock."""
    if addon is None:
        lines = [
            "# qfn-int8kv engine lock. Generated; do not edit (regenerate: builder base lock --platform " + platform + ").",
            "# Install: pip install --require-hashes --no-deps --only-binary=:all: -r <this file>",
            f"# engine: {engine}",
        ]
    else:
        lines = [
            f"# qfn-int8kv add-on lock over the engine lock below. Generated; do not edit (regenerate: builder base lock "
            f"--platform {platform} --addon {addon}).",
            "# Install, after the engine lock into its venv: pip install --require-hashes --no-deps --only-binary=:all: -r <this file>",
            f"# engine: {engine}",
            f"# addon: {addon}",
            f"# engine-lock: {engine_lock}",
        ]
    lines += [
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


def parse_addon(spec: str) -> tuple[str, str]:
    """An add-on requirement, exactly one version (ray==2.60.0 or ray[cgraph]==2.60.0), as
    (the requirement pip is given, the lock's file stem: ray-2.60.0, ray-cgraph-2.60.0)."""
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise LockError(f"--addon {spec!r} is not a requirement: {exc}", hint="pass NAME==VERSION, e.g. ray==2.60.0") from None
    specs = list(req.specifier)
    if req.url or req.marker or len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise LockError(f"--addon {spec!r} does not name exactly one version",
                        hint="pass NAME==VERSION (e.g. ray==2.60.0): the lock's name carries the version, and a re-lock must not drift")
    name = canonicalize_name(req.name)
    extras = "".join(f"-{canonicalize_name(e)}" for e in sorted(req.extras))
    extra_spec = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{name}{extra_spec}=={specs[0].version}", f"{name}{extras}-{specs[0].version}"


def constraints_text(lock: EngineLock) -> str:
    """Every pin of an engine lock as a pip constraint (`name==version`, no hashes), so a resolution
    over it can add packages but never move one the lock pins."""
    return "".join(f"{e.name}=={e.version}\n" for e in lock.entries)


def addon_wheels(engine: EngineLock, wheels: list[Path], *, addon: str) -> list[Path]:
    """The wheels of an add-on resolution that the engine lock lacks; refuses one that would move an engine pin.

    pip already honours the constraints; this is the check that the lock written from its output
    holds nothing the engine lock pins (a name pip normalised differently, an extra, a stray file).
    """
    moved, added = [], []
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        pin = engine.entry(name)
        if pin is None:
            added.append(wheel)
        elif version != _version(pin.version):
            moved.append(f"{name} {pin.version} -> {version}")
    if moved:
        raise LockError(
            f"{addon} needs versions other than the engine lock {engine.path.name} pins: {', '.join(moved)}",
            hint=addon_conflict_hint(addon, engine),
        )
    if not added:
        raise LockError(f"{addon} adds nothing to the engine lock {engine.path.name}: every wheel it needs is already pinned there",
                        hint="no add-on lock is needed; drop it from target.addon_locks")
    return added


def addon_conflict_hint(addon: str, engine: EngineLock) -> str:
    return (
        f"pick a version of the add-on whose requirements accept the engine's pins (`pip index versions "
        f"{addon.split('==', 1)[0]}`, its release notes), and resolve again: `builder base lock --platform "
        f"{engine.platform} --addon NAME==VERSION`; moving an engine pin means re-locking the engine "
        "(`builder base lock --platform P`), which invalidates the images and evidence recorded against it"
    )


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def pip_conflict(lines: list[str]) -> list[str] | None:
    """What pip's output says caused a ResolutionImpossible (its "The conflict is caused by:" lines);
    None when the output shows no resolution conflict (a network or index failure is another error)."""
    if not any("ResolutionImpossible" in ln or "conflicting dependencies" in ln for ln in lines):
        return None
    causes, inside = [], False
    for line in lines:
        text = line.strip()
        if text.startswith("The conflict is caused by"):
            inside = True
        elif inside and (not text or text.startswith("To fix this")):
            inside = False
        elif inside:
            causes.append(text)
    return causes or [ln.strip() for ln in lines if "conflicting dependencies" in ln or "ResolutionImpossible" in ln]
