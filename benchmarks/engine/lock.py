"""The runtime wheel lock: `name==version --hash=sha256:HEX` lines, fetched with pip --require-hashes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from benchmarks.engine.errors import EngineHarnessError
from builder.hashing import sha256_file
from builder.image.lock import LockEntry, parse_entry

LOCK_FILE = Path(__file__).with_name("wheels.lock")
#: The H200's interpreter and platform (Python 3.12, glibc manylinux, x86_64).
PYTHON_VERSION = "3.12"
PLATFORMS = tuple(
    f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)
) + ("manylinux2014_x86_64", "manylinux1_x86_64")


#: Distributions the driver imports for its own checks, not found by the engine's import probe
#: (the api_surface gate drives the server with the OpenAI client): the lock must close their
#: requirements (without openai's `jiter` the api_surface gate raises).
DRIVER_DISTRIBUTIONS = ("openai",)
#: What the H200 host's own Python already holds of those requirements.
DEVICE_IMAGE_HAS = frozenset({"anyio", "httpx", "httpcore", "h11", "idna", "certifi", "tqdm"})
#: Packages a structured-output request needs before a backend is chosen, by import name: vLLM 0.33's
#: SamplingParams._validate_structured_outputs imports every backend module, and those without
#: `from __future__ import annotations` evaluate their lazily loaded package in an annotation at import
#: (backend_lm_format_enforcer: json_mode gets an empty HTTP 500 from that ModuleNotFoundError,
#: wrapped in EngineGenerateError). Import name -> distribution, with what that distribution requires.
REQUEST_TIME_PACKAGES = {
    "lmformatenforcer": ("lm-format-enforcer", ("interegular",)),
    "llguidance": ("llguidance", ()),
    "xgrammar": ("xgrammar", ()),
}


def read_lock(path: Path = LOCK_FILE) -> list[LockEntry]:
    """Parse the lock; every non-comment line must be `name==version --hash=sha256:HEX` (the engine
    lock's line without its file name: builder.image.lock.parse_entry reads both)."""
    locked, seen = [], set()
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        entry = parse_entry(line)
        if entry is None:
            raise EngineHarnessError(f"{path.name} line {n} is not 'name==version --hash=sha256:HEX': {line[:80]!r}",
                                     hint="fix the line; every wheel is pinned by version and sha256")
        key = canonicalize_name(entry.name)
        if key in seen:
            raise EngineHarnessError(f"{path.name} line {n}: {entry.name} is listed twice",
                                     hint="keep one version of each package (two stop the GPU host's install)")
        seen.add(key)
        locked.append(entry)
    if not locked:
        raise EngineHarnessError(f"{path} lists no wheels", hint="restore benchmarks/engine/wheels.lock")
    return locked


def check_wheels(locked: list[LockEntry], wheels: list[Path]) -> None:
    """Exactly one file per locked wheel, with the locked sha256."""
    by_sha = {w.sha256: w for w in locked}
    found: set[str] = set()
    for path in wheels:
        sha = sha256_file(path)
        if sha not in by_sha:
            raise EngineHarnessError(f"{path.name} has sha256 {sha}, which wheels.lock does not list",
                                     hint="delete it and fetch again (`python -m benchmarks.engine wheels`)")
        found.add(sha)
    missing = [f"{w.name}=={w.version}" for w in locked if w.sha256 not in found]
    if missing:
        raise EngineHarnessError(f"missing locked wheels: {', '.join(missing)}",
                                 hint="fetch them (`python -m benchmarks.engine wheels`)")


def fetch_wheels(*, dest: Path, lock: Path = LOCK_FILE) -> list[Path]:
    """pip download every locked wheel (cp312, manylinux x86_64) into dest, hashes required."""
    locked = read_lock(lock)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--require-hashes", "--python-version", PYTHON_VERSION, "--implementation", "cp",
           *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(dest), "-r", str(lock)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EngineHarnessError(f"pip download of the locked wheels failed: {proc.stderr.strip()[-500:]}",
                                 hint="check access to PyPI; a hash mismatch means the index serves other bytes")
    # dest may hold other locks' wheels too (the graphs lock fetches into a folder of its own)
    wanted = {(canonicalize_name(w.name), Version(w.version)) for w in locked}
    wheels = sorted(p for p in dest.glob("*.whl") if parse_wheel_filename(p.name)[:2] in wanted)
    check_wheels(locked, wheels)
    return wheels
