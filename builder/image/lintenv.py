"""The launch lint on the host, without building an image: the locked engine in a venv, patched.

A GPU image runs the lint on its own engine (`qfn-selfcheck`). Building one takes most of an hour
here, so CI lints the rendered launch command of every GPU target in a venv holding exactly the
amd64 engine lock (vllm==0.33.0, its torch and every dependency, --require-hashes) and the add-on
locks resolved over it (Ray, which a multi-host target's executor imports), with the patch series
applied as the image applies it. The CUDA libraries come along because they are what the
locked torch imports: a venv "without CUDA" (CPU torch) cannot import the model registry, which
needs the locked torchvision, which links the CUDA torch. No GPU is needed to import any of it.
The venv lives in the cache and is rebuilt when the lock or the series changes; its wheels come from
the base builds' wheel cache, which it fills, so each is downloaded once per machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from builder import selfcheck
from builder.checksums import tree_digest
from builder.config import ReleaseConfig, launch_plan
from builder.constants import (
    CACHE_DIR,
    ENGINE_CACHE_DIR,
    ENGINE_UPSTREAM_VERSION,
    ENGINE_WHEEL_NAME,
    LOCKS_DIR,
    PATCHES_DIR,
    WHEEL_CACHE_DIR,
    WHEEL_DOWNLOAD_WORKERS,
)
from builder.errors import LockError, SelfCheckError
from builder.image.context import selfcheck_facts
from builder.hashing import sha256_file
from builder.image.lock import EngineLock, missing_wheels, read_lock
from builder.launch import render_launch

LINT_VENV_DIR = CACHE_DIR / "lint-venv"
BYTECODE_STAMP = ".qfn-lint-bytecode"


def ensure_lint_venv(
    *,
    lock_path: Path | None = None,
    venv: Path = LINT_VENV_DIR,
    wheel_cache: Path = WHEEL_CACHE_DIR / "amd64",
    engine_cache: Path = ENGINE_CACHE_DIR,
    patches_dir: Path = PATCHES_DIR,
    log=print,
    output=None,
) -> Path:
    """The venv's python: the lock installed, the series applied; rebuilt when either changed (stamp).
    ``output``: a file for pip's and the venv's own output (default: inherited)."""
    lock_path = lock_path or LOCKS_DIR / f"vllm-{ENGINE_UPSTREAM_VERSION}-linux-amd64.txt"
    lock = read_lock(lock_path)
    addons = addon_locks_over(lock)
    python = venv / "bin" / "python"
    stamp = venv / ".qfn-lint-venv"
    key = (f"{lock.digest} {' '.join(read_lock(a).digest for a in addons)} series {tree_digest(patches_dir)} "
           f"python {sys.version_info[0]}.{sys.version_info[1]}")
    if python.is_file() and stamp.is_file() and stamp.read_text().strip() == key:
        ensure_bytecode(python=python, venv=venv, log=log)
        return python
    # A venv's scripts name its path, so it is built in place; the stamp, written last, marks it
    # complete: an interrupted build has none and is rebuilt, never used half-installed.
    if venv.exists():
        shutil.rmtree(venv)
    log(f"lint venv: {lock.engine} from {lock_path.name} ({lock.digest[:19]}), patched, into {venv}")
    quiet = {"stdout": output, "stderr": output} if output is not None else {}
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, **quiet)
        for locked in (lock, *(read_lock(a) for a in addons)):  # a target's add-ons (Ray) change what the engine's config accepts
            fill_wheel_cache(lock=locked, cache=wheel_cache, engine_cache=engine_cache, python=python, log=log, output=output)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--progress-bar", "off", "--no-index", "--find-links", str(wheel_cache),
                 "--require-hashes", "--no-deps", "--only-binary=:all:", "--no-compile", "-r", str(locked.path)],
                check=True, **quiet,
            )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise LockError(f"the lint venv could not be installed ({exc})", hint="check access to PyPI; the pip output is above") from exc
    from builder.patches.apply import apply_series

    site = _site(python)
    report = apply_series(target=site, patches_dir=patches_dir)
    log(f"lint venv: patch series applied to {site} ({len(report.applied)} file sections)")
    ensure_bytecode(python=python, venv=venv, site=site, log=log)  # after the series: its files are compiled too
    stamp.write_text(key + "\n")
    return python


def fill_wheel_cache(*, lock: EngineLock, cache: Path, engine_cache: Path, python: Path, log=print, output=None) -> None:
    """Every wheel of ``lock`` in ``cache``, the base builds' wheel cache: a later base build or lint
    venv downloads none of them again. The engine wheel `builder patches fetch-engine` keeps (the
    lock's vllm, same sha256) is linked in; pip downloads the rest, each file checked against its hash,
    in WHEEL_DOWNLOAD_WORKERS processes at once (one stream leaves most of the link idle). pip's own cache
    is left out: it would hold every wheel a second time."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = set(missing_wheels(lock, cache))
    engine = lock.entry("vllm")
    kept = engine_cache / ENGINE_WHEEL_NAME
    if engine is not None and engine.filename in missing and not (cache / engine.filename).exists() and kept.is_file():
        if sha256_file(kept) == engine.sha256:
            _link_into(kept, cache / engine.filename)
            missing.discard(engine.filename)
    entries = [e for e in lock.entries if e.filename in missing]
    if not entries:
        return
    log(f"lint venv: downloading {len(entries)} of the {len(lock.entries)} wheels of {lock.path.name} into {cache}")
    quiet = {"stdout": output, "stderr": output} if output is not None else {}
    with tempfile.TemporaryDirectory(prefix="qfn-wheels-") as tmp:
        procs = []
        for i in range(min(WHEEL_DOWNLOAD_WORKERS, len(entries))):
            part = Path(tmp) / f"part-{i}.txt"
            part.write_text("".join(f"{e.name}=={e.version} --hash=sha256:{e.sha256}\n" for e in entries[i::WHEEL_DOWNLOAD_WORKERS]))
            procs.append(subprocess.Popen(
                [str(python), "-m", "pip", "download", "--quiet", "--progress-bar", "off", "--no-cache-dir", "--require-hashes",
                 "--no-deps", "--only-binary=:all:", "-d", str(cache), "-r", str(part)], **quiet))  # fmt: skip
        failed = [proc.args for proc in procs if proc.wait() != 0]
    if failed:
        raise subprocess.CalledProcessError(1, failed[0])


def _link_into(source: Path, dest: Path) -> None:
    """``source`` at ``dest`` (a hard link where one filesystem holds both), whole or not at all."""
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copy2(source, tmp)
    tmp.replace(dest)


def _site(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip


def ensure_bytecode(*, python: Path, venv: Path, site: Path | None = None, log=print) -> None:
    """Compile the venv's site-packages once (stamped). Each lint is a fresh process, and where the host
    sets PYTHONDONTWRITEBYTECODE none of them could keep what it compiled: every lint would compile
    torch and the engine from source again, about half of its time. `site`: the venv's purelib, asked
    of `python` where not given."""
    stamp = venv / BYTECODE_STAMP
    if stamp.is_file():
        return
    site = site or _site(python)
    log(f"lint venv: compiling bytecode in {site}")
    # Files that are not Python 3.11 (templates, another version's test helpers) are never imported;
    # compileall names them and exits 1, so its status says nothing about the rest.
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(site)], capture_output=True, check=False)
    stamp.write_text("compileall\n")


def addon_locks_over(engine: EngineLock) -> list[Path]:
    """Every add-on lock beside ``engine`` resolved over it (the lint venv holds them all)."""
    return [path for path in sorted(engine.path.parent.glob("*.txt")) if read_lock(path).resolved_over(engine)]


def lint_target(*, cfg: ReleaseConfig, python: Path) -> str:
    """Render the target's launch script and run the self-check's lint half on it with ``python``."""
    with tempfile.TemporaryDirectory(prefix="qfn-lint-") as tmp:
        root = Path(tmp)
        for rel, text in render_launch(cfg=cfg, plan=launch_plan(cfg)).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        lib = root / "lib" / "builder"
        package = Path(selfcheck.__file__).parent
        lib.mkdir(parents=True)
        shutil.copy2(package.parent / "__init__.py", lib / "__init__.py")
        shutil.copytree(package, lib / "selfcheck", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        t = cfg.target
        facts = root / "target.json"
        facts.write_text(json.dumps(selfcheck_facts(cfg)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHONPATH"))} | {"PYTHONPATH": str(root / "lib")}
        proc = subprocess.run(
            [str(python), "-m", "builder.selfcheck", "--only", "lint", "--launch", str(root / "launch" / "run_qsa_int8kv.sh"),
             "--target-file", str(facts)],
            env=env, capture_output=True, text=True, check=False, cwd=root,
        )  # fmt: skip
    output = proc.stdout
    if proc.returncode != 0:
        failed = [ln for ln in output.splitlines() if ln.startswith("FAIL")]
        raise SelfCheckError(
            f"launch lint of target {cfg.target.name} failed: " + ("; ".join(failed) or (output + proc.stderr)[-2000:]),
            hint="the engine's own message is above; fix the target's flags",
        )
    return output
