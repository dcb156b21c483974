"""GPU bases from the engine lock: resolve a lock, fetch its wheels, install them into an OS base.

Everything runs in containers of the Debian OS base of the lock's platform (scripts/build-base-image.sh
--gpu), so the platform's own pip resolves and installs; on an x86_64 host the arm64 one runs under
QEMU user emulation. The CA bundle is mounted read-only while pip needs it and is never committed;
the result is one `docker commit` layer (/opt/venv) on the OS base, labelled with the lock digest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import docker
from docker.errors import ImageNotFound
from docker.types import Mount
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from builder.constants import (
    DOCKER_SLOW_API_TIMEOUT_S,
    BINFMT_DIR,
    ENGINE_LOCK_INPUT,
    LOCK_BASE_REPO,
    LOCK_BASE_VENV,
    LOCKS_DIR,
    OS_BASE_REF,
    QEMU_BINFMT,
    QFN_LABEL_PREFIX,
    REPO_ROOT,
    WHEEL_CACHE_DIR,
)
from builder.errors import BuilderError, DockerError, LockError
from builder.image.daemon import daemon_arch, docker_client
from builder.image.lock import (
    EngineLock,
    addon_conflict_hint,
    addon_wheels,
    constraints_text,
    missing_wheels,
    parse_addon,
    pip_conflict,
    read_lock,
    render_lock,
)

LABEL_LOCK_DIGEST = f"{QFN_LABEL_PREFIX}.base.lock.sha256"
LABEL_LOCK_ENGINE = f"{QFN_LABEL_PREFIX}.base.lock.engine"
LABEL_OS_BASE = f"{QFN_LABEL_PREFIX}.base.os"
LABEL_BYTECODE = f"{QFN_LABEL_PREFIX}.base.bytecode"
#: One label per add-on lock, keyed by its name (ray-2.60.0), valued path@sha256: on the base and the image.
LABEL_ADDON_LOCK = f"{QFN_LABEL_PREFIX}.base.addon-lock"
#: Digest of the engine lock and add-on locks together: what an add-on base is reused by.
LABEL_ADDONS_DIGEST = f"{QFN_LABEL_PREFIX}.base.addons.sha256"
INSTALL_MOUNT = "/tmp/qfn-install"
_PATH = f"{LOCK_BASE_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LockBase(BaseModel):
    """A lock-built base on this daemon."""

    model_config = ConfigDict(frozen=True)

    tag: str
    id: str  # sha256:<image id>: the FROM reference (content-addressed, so pinned)
    lock_digest: str
    built: bool  # False when an existing base with this lock digest was reused
    seconds: float
    emulated: bool
    addon_pins: tuple[str, ...] = ()  # path@sha256 of each add-on lock installed over the engine lock


def lock_path(*, engine: str, arch: str, locks_dir: Path = LOCKS_DIR) -> Path:
    return locks_dir / f"{engine}-linux-{arch}.txt"


def base_tag(lock: EngineLock) -> str:
    arch = lock.platform.split("/", 1)[1]
    return f"{LOCK_BASE_REPO}:{lock.engine.replace('==', '-')}-{arch}-{lock.digest.split(':', 1)[1][:12]}"


def addon_name(lock: EngineLock) -> str:
    """An add-on lock's name without its platform: ray-2.60.0 for ray-2.60.0-linux-arm64.txt."""
    return lock.path.name.removesuffix(".txt").removesuffix("-" + lock.platform.replace("/", "-"))


def addon_pin(lock: EngineLock, repo_root: Path = REPO_ROOT) -> str:
    try:
        rel = lock.path.resolve().relative_to(repo_root.resolve()).as_posix()
    except ValueError:
        rel = lock.path.as_posix()
    return f"{rel}@{lock.digest}"


def addon_labels(pins: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The label of each add-on lock pin (path@sha256), keyed by the lock's name without its platform."""
    out = {}
    for pin in pins:
        name = PurePosixPath(pin.split("@", 1)[0]).name.removesuffix(".txt")
        out[f"{LABEL_ADDON_LOCK}.{re.sub(r'-linux-(arm64|amd64)$', '', name)}"] = pin
    return out


def addons_digest(lock: EngineLock, addons: tuple[EngineLock, ...]) -> str:
    return "sha256:" + hashlib.sha256("\n".join([lock.digest, *(a.digest for a in addons)]).encode()).hexdigest()


def addon_base_tag(lock: EngineLock, addons: tuple[EngineLock, ...]) -> str:
    return f"{base_tag(lock)}-addons-{addons_digest(lock, addons).split(':', 1)[1][:12]}"


def emulation_needed(client: docker.DockerClient, arch: str) -> bool:
    """True when ``arch`` differs from the daemon's; then QEMU binfmt must be registered or we refuse."""
    host = daemon_arch(client)
    if host == arch:
        return False
    entry = BINFMT_DIR / QEMU_BINFMT.get(arch, f"qemu-{arch}")
    try:
        enabled = entry.read_text().splitlines()[0].strip() == "enabled"
    except OSError:
        enabled = False
    if not enabled:
        raise DockerError(
            f"linux/{arch} on this linux/{host} daemon needs QEMU user emulation, and {entry} is not registered",
            hint="as root: `bash scripts/host-setup.sh --emulation` (apt-get install qemu-user-static; "
            "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable qemu-aarch64), "
            f"or build on a linux/{arch} host",
        )
    return True


def ensure_os_base(*, arch: str, console: Console, repo_root: Path = REPO_ROOT) -> str:
    """The Debian OS base of ``arch`` (debootstrap -> import -> local registry), built once per machine."""
    ref = OS_BASE_REF.format(arch=arch)
    cmd = ["bash", str(repo_root / "scripts/build-base-image.sh"), "--if-missing", "--gpu", "--platform", f"linux/{arch}", ref]
    console.print(f"base: OS base {ref}", highlight=False, markup=False, soft_wrap=True)
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        raise DockerError(f"building the OS base {ref} failed (exit {proc.returncode})", hint="see the debootstrap output above")
    return ref


def _run(
    *,
    client: docker.DockerClient,
    image: str,
    script: str,
    mounts: dict[str, dict[str, str]],
    env: dict[str, str],
    console: Console,
    what: str,
    progress: Callable[[docker.models.containers.Container, list[str]], str] | None = None,
    network: str = "bridge",
    refusal: Callable[[list[str]], BuilderError | None] | None = None,
) -> tuple[docker.models.containers.Container, list[str]]:
    """Run ``sh -c script`` in ``image``, echo its output with elapsed seconds, and print a heartbeat
    (``progress(container, lines so far)``) every 30 s of silence. Returns the stopped container (caller removes it).
    A failure raises what ``refusal(lines)`` makes of the output, or a DockerError when it makes nothing."""
    # HostConfig mounts, not `volumes=`: the SDK also declares those as VOLUMEs in the container's
    # config, which `docker commit` would carry into the base (and FROM would then mount over files).
    binds = [Mount(target=m["bind"], source=host, type="bind", read_only=m["mode"] == "ro") for host, m in mounts.items()]
    container = client.containers.run(image, ["sh", "-c", script], detach=True, mounts=binds, environment=env, network_mode=network)
    start = time.monotonic()
    done = threading.Event()
    last = [start]

    def heartbeat() -> None:
        while not done.wait(30):
            if time.monotonic() - last[0] >= 30:
                note = progress(container, lines) if progress else "working"
                console.print(f"[{time.monotonic() - start:5.0f}s] {what}: {note}", highlight=False, markup=False, soft_wrap=True)

    lines: list[str] = []
    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        for raw in container.logs(stream=True, follow=True):
            for line in raw.decode(errors="replace").splitlines():
                last[0] = time.monotonic()
                lines.append(line)
                console.print(f"[{last[0] - start:5.0f}s] {line}", highlight=False, markup=False, soft_wrap=True)
        code = container.wait()["StatusCode"]
    except BaseException:
        done.set()
        container.remove(force=True)
        raise
    done.set()
    if code != 0:
        container.remove(force=True)
        refused = refusal(lines) if refusal else None
        if refused is not None:
            raise refused
        raise DockerError(f"{what} failed in {image} (exit {code}): " + "\n".join(lines[-15:]), hint="the output is shown above")
    return container, lines


def check_ca_bundle(ca_bundle: Path | None) -> Path | None:
    """--ca-bundle must be a readable file. Commands call this first: found only when a container
    is set up, it would fail after the daemon was contacted (and, for an image, after its base was built)."""
    if ca_bundle is not None and not (ca_bundle.is_file() and os.access(ca_bundle, os.R_OK)):
        raise DockerError(f"--ca-bundle {ca_bundle} is not a readable file",
                          hint="pass a PEM bundle, e.g. /etc/ssl/certs/ca-certificates.crt")
    return ca_bundle


def _ca_mount(ca_bundle: Path | None) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    if check_ca_bundle(ca_bundle) is None:
        return {}, {}
    return {str(ca_bundle.resolve()): {"bind": "/qfn-ca/ca.crt", "mode": "ro"}}, {"PIP_CERT": "/qfn-ca/ca.crt"}


_PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_DEFAULT_TIMEOUT": "180", "PIP_NO_CACHE_DIR": "1"}


def resolve_lock(
    *,
    arch: str,
    ca_bundle: Path | None,
    console: Console,
    engine: str,
    requirements: Path = ENGINE_LOCK_INPUT,
    locks_dir: Path = LOCKS_DIR,
    wheel_cache: Path = WHEEL_CACHE_DIR,
    repo_root: Path = REPO_ROOT,
) -> Path:
    """Resolve ``requirements`` with the platform's own pip and write the lock (atomically).

    The wheels pip downloads are kept in the wheel cache, so the base build that follows downloads nothing.
    """

    def render(wheels: list[Path], python: str, pip_version: str) -> tuple[Path, str, list[Path]]:
        text = render_lock(
            engine=engine, platform=f"linux/{arch}", python=python, os_base=f"debian bookworm minbase ({OS_BASE_REF.format(arch=arch)})",
            resolved_by=f"pip {pip_version} download --only-binary=:all: -r {requirements.name}", wheels=wheels,
        )  # fmt: skip
        return lock_path(engine=engine.replace("==", "-"), arch=arch, locks_dir=locks_dir), text, wheels

    return _resolve(
        arch=arch, ca_bundle=ca_bundle, console=console, what=requirements.name, inputs={"requirements.in": requirements},
        pip_args="-r /in/requirements.in", render=render, wheel_cache=wheel_cache, repo_root=repo_root,
    )  # fmt: skip


def resolve_addon_lock(
    *,
    arch: str,
    ca_bundle: Path | None,
    console: Console,
    addon: str,
    engine_lock: Path,
    locks_dir: Path = LOCKS_DIR,
    wheel_cache: Path = WHEEL_CACHE_DIR,
    repo_root: Path = REPO_ROOT,
) -> Path:
    """Resolve the add-on ``addon`` (name==version) over ``engine_lock`` and write its add-on lock.

    The platform's own pip resolves as for the engine lock, with every engine pin as a constraint
    (-c), so the resolution can only add packages; the lock holds just the wheels the engine lock
    lacks, and names the engine lock by digest. A conflict with an engine pin is refused (LockError).
    """
    requirement, stem = parse_addon(addon)
    engine = read_lock(engine_lock)
    if engine.addon is not None:
        raise LockError(f"{engine_lock} is an add-on lock; an add-on is resolved over an engine lock",
                        hint=f"pass the engine lock of linux/{arch} (docker/locks/<engine>-linux-{arch}.txt)")
    if engine.platform != f"linux/{arch}":
        raise LockError(f"engine lock {engine_lock} is for {engine.platform}, not linux/{arch}",
                        hint=f"pass the engine lock of linux/{arch}")
    try:
        engine_ref = f"{engine_lock.resolve().relative_to(repo_root.resolve())}@{engine.digest}"
    except ValueError:  # a lock outside the checkout (tests): its name still says which one
        engine_ref = f"{engine_lock.name}@{engine.digest}"

    def render(wheels: list[Path], python: str, pip_version: str) -> tuple[Path, str, list[Path]]:
        if python != engine.python:
            raise LockError(f"the add-on resolved under Python {python}, the engine lock {engine_lock.name} under {engine.python}",
                            hint="rebuild the OS base (scripts/build-base-image.sh --gpu) or re-lock the engine; both must use one interpreter")
        added = addon_wheels(engine, wheels, addon=requirement)
        console.print(f"lock: {len(wheels) - len(added)} of the {len(wheels)} wheels are engine pins (kept as the engine lock has them); "
                      f"{len(added)} added: {', '.join(w.name.split('-', 2)[0] + ' ' + w.name.split('-', 2)[1] for w in added)}",
                      highlight=False, markup=False, soft_wrap=True)  # fmt: skip
        text = render_lock(
            engine=engine.engine, platform=engine.platform, python=python, os_base=f"debian bookworm minbase ({OS_BASE_REF.format(arch=arch)})",
            resolved_by=f"pip {pip_version} download --only-binary=:all: -c <the pins of {engine_lock.name}> {requirement}",
            wheels=added, addon=requirement, engine_lock=engine_ref,
        )  # fmt: skip
        return lock_path(engine=stem, arch=arch, locks_dir=locks_dir), text, wheels

    def refusal(lines: list[str]) -> BuilderError | None:
        causes = pip_conflict(lines)
        if causes is None:
            return None
        return LockError(f"{requirement} cannot be resolved without moving a pin of the engine lock {engine_lock.name}: "
                         + "; ".join(causes), hint=addon_conflict_hint(requirement, engine))

    with tempfile.TemporaryDirectory(prefix="qfn-addon-") as tmp:
        constraints = Path(tmp) / "engine-pins.txt"
        constraints.write_text(constraints_text(engine))
        return _resolve(
            arch=arch, ca_bundle=ca_bundle, console=console, what=f"{requirement} over {engine_lock.name}",
            inputs={"engine-pins.txt": constraints}, pip_args=f"-c /in/engine-pins.txt {shlex.quote(requirement)}",
            render=render, wheel_cache=wheel_cache, repo_root=repo_root, refusal=refusal,
        )  # fmt: skip


def _resolve(
    *,
    arch: str,
    ca_bundle: Path | None,
    console: Console,
    what: str,
    inputs: dict[str, Path],
    pip_args: str,
    render: Callable[[list[Path], str, str], tuple[Path, str, list[Path]]],
    wheel_cache: Path,
    repo_root: Path,
    refusal: Callable[[list[str]], BuilderError | None] | None = None,
) -> Path:
    """`pip download` in the platform's OS base, with ``inputs`` mounted under /in; ``render`` turns the
    downloaded wheels into (lock path, lock text, wheels to keep), and the lock is written atomically."""
    client = docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S)
    emulated = emulation_needed(client, arch)
    os_base = ensure_os_base(arch=arch, console=console, repo_root=repo_root)
    cache = wheel_cache / arch
    cache.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".resolve-", dir=cache))
    ca_mounts, ca_env = _ca_mount(ca_bundle)
    try:
        console.print(
            f"lock: resolving {what} for linux/{arch} with the OS base's own pip"
            + (" under QEMU user emulation (slow)" if emulated else ""),
            highlight=False,
            soft_wrap=True,
        )
        start = time.monotonic()
        script = (
            "set -eu; python3 -c 'import platform; print(\"QFN-PYTHON\", platform.python_version())'; "
            "python3 -m venv /tmp/resolver; /tmp/resolver/bin/pip --version; "
            f"/tmp/resolver/bin/pip download --only-binary=:all: --progress-bar off -d /wheels {pip_args}"
        )
        mounts = {
            **{str(path.resolve()): {"bind": f"/in/{name}", "mode": "ro"} for name, path in inputs.items()},
            str(fresh): {"bind": "/wheels", "mode": "rw"},
            **ca_mounts,
        }
        container, lines = _run(
            client=client, image=os_base, script=script, mounts=mounts, env=_PIP_ENV | ca_env, console=console,
            what="pip download", progress=lambda _, seen: f"{sum(ln.startswith('Collecting') for ln in seen)} requirements collected so far",
            refusal=refusal,
        )  # fmt: skip
        container.remove(force=True)
        python = next((ln.split()[1] for ln in lines if ln.startswith("QFN-PYTHON ")), "unknown")
        pip_version = next((ln.split()[1] for ln in lines if ln.startswith("pip ")), "unknown")
        wheels = sorted(fresh.glob("*.whl"))
        if not wheels:
            raise LockError(f"pip resolved nothing for {what}", hint="see the pip output above")
        out, text, keep = render(wheels, python, pip_version)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, out)
        for wheel in keep:  # into the shared cache, where the base build looks first
            os.replace(wheel, cache / wheel.name)
        console.print(f"lock: {len(text.splitlines()) - sum(ln.startswith('#') for ln in text.splitlines())} wheels for "
                      f"linux/{arch} in {time.monotonic() - start:.0f} s -> {out}", highlight=False, markup=False, soft_wrap=True)  # fmt: skip
        return out
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def ensure_wheels(*, lock: EngineLock, os_base: str, client: docker.DockerClient, ca_bundle: Path | None, console: Console, cache: Path) -> None:
    """Every wheel of the lock in the cache with its locked sha256; pip downloads the missing ones."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = missing_wheels(lock, cache)
    if not missing:
        console.print(f"base: all {len(lock.entries)} locked wheels are cached in {cache}", highlight=False, markup=False, soft_wrap=True)
        return
    console.print(f"base: downloading {len(missing)} of {len(lock.entries)} locked wheels into {cache}", highlight=False, markup=False, soft_wrap=True)
    ca_mounts, ca_env = _ca_mount(ca_bundle)
    mounts = {str(lock.path.resolve()): {"bind": "/lock/lock.txt", "mode": "ro"}, str(cache): {"bind": "/wheels", "mode": "rw"}, **ca_mounts}
    script = (
        "set -eu; python3 -m venv /tmp/fetcher; "
        "/tmp/fetcher/bin/pip download --require-hashes --no-deps --only-binary=:all: --progress-bar off -d /wheels -r /lock/lock.txt"
    )
    container, _ = _run(
        client=client, image=os_base, script=script, mounts=mounts, env=_PIP_ENV | ca_env, console=console,
        what="pip download (locked)", progress=lambda _c, _l: f"{len(lock.entries) - len(missing_wheels(lock, cache))}/{len(lock.entries)} wheels cached",
    )  # fmt: skip
    container.remove(force=True)
    still = missing_wheels(lock, cache)
    if still:
        raise LockError(f"{len(still)} locked wheels are still missing or differ: {', '.join(still[:5])}", hint="rerun; if it persists the index serves different files")


def find_lock_base(client: docker.DockerClient, lock: EngineLock) -> str | None:
    """The image id of an existing base built from exactly this lock, else None."""
    return _find_base(client, base_tag(lock), LABEL_LOCK_DIGEST, lock.digest)


def _find_base(client: docker.DockerClient, tag: str, label: str, digest: str) -> str | None:
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    return image.id if (image.labels or {}).get(label) == digest else None


def ensure_lock_base(
    *,
    lock: EngineLock,
    ca_bundle: Path | None,
    console: Console,
    addons: tuple[EngineLock, ...] = (),
    wheel_cache: Path = WHEEL_CACHE_DIR,
    repo_root: Path = REPO_ROOT,
) -> LockBase:
    """The base built from ``lock`` (reused when present): OS base + /opt/venv with every locked wheel.

    With ``addons`` (load_pinned_addons), one more layer over that engine base installs each add-on
    lock into the same venv; the engine base stays as it is, shared with targets without add-ons.
    """
    if not addons:
        return _ensure_engine_base(lock=lock, ca_bundle=ca_bundle, console=console, wheel_cache=wheel_cache, repo_root=repo_root)
    client = docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S)
    arch = lock.platform.split("/", 1)[1]
    emulated = emulation_needed(client, arch)
    tag = addon_base_tag(lock, addons)
    pins = tuple(addon_pin(a, repo_root) for a in addons)
    existing = _find_base(client, tag, LABEL_ADDONS_DIGEST, addons_digest(lock, addons))
    if existing is not None:
        console.print(f"base: {tag} ({existing[7:19]}) was built from these locks; reusing it", highlight=False, markup=False, soft_wrap=True)
        return LockBase(tag=tag, id=existing, lock_digest=lock.digest, built=False, seconds=0.0, emulated=emulated, addon_pins=pins)
    engine = _ensure_engine_base(lock=lock, ca_bundle=ca_bundle, console=console, wheel_cache=wheel_cache, repo_root=repo_root)
    start = time.monotonic()
    os_base = ensure_os_base(arch=arch, console=console, repo_root=repo_root)
    cache = wheel_cache / arch
    for addon in addons:
        ensure_wheels(lock=addon, os_base=os_base, client=client, ca_bundle=ca_bundle, console=console, cache=cache)
    names = ", ".join(addon_name(a) for a in addons)
    console.print(f"base: installing the add-on locks {names} into {LOCK_BASE_VENV} over {engine.tag}", highlight=False, markup=False, soft_wrap=True)
    mounts = {
        **{str(a.path.resolve()): {"bind": f"{INSTALL_MOUNT}/addon-{i}.txt", "mode": "ro"} for i, a in enumerate(addons)},
        str(cache): {"bind": f"{INSTALL_MOUNT}/wheels", "mode": "ro"},
        str((repo_root / "docker" / "install-lock").resolve()): {"bind": f"{INSTALL_MOUNT}/install-lock", "mode": "ro"},
    }
    compile_mode = "no-compile" if emulated else "compile"
    script = "set -eu; " + "; ".join(
        f"sh {INSTALL_MOUNT}/install-lock --over {INSTALL_MOUNT}/addon-{i}.txt {INSTALL_MOUNT}/wheels {LOCK_BASE_VENV} {compile_mode}"
        for i in range(len(addons))
    )
    container, _ = _run(
        client=client, image=engine.id, mounts=mounts, script=script, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        console=console, what="install-lock (add-ons)", network="none",  # from the hash-checked wheel cache only
    )  # fmt: skip
    try:
        console.print(f"base: committing {tag}", highlight=False, markup=False, soft_wrap=True)
        parent = client.images.get(engine.id).attrs.get("Config") or {}
        repo, _, tagname = tag.rpartition(":")
        image = container.commit(
            repository=repo,
            tag=tagname,
            conf={
                "Env": parent.get("Env") or [], "Cmd": parent.get("Cmd") or ["/bin/bash"],
                "Labels": (parent.get("Labels") or {}) | addon_labels(pins) | {LABEL_ADDONS_DIGEST: addons_digest(lock, addons)},
            },
        )  # fmt: skip
    finally:
        container.remove(force=True)
    seconds = time.monotonic() - start
    console.print(f"base: built {tag} ({image.id[7:19]}) in {seconds:.0f} s", highlight=False, markup=False, soft_wrap=True)
    return LockBase(tag=tag, id=image.id, lock_digest=lock.digest, built=True, seconds=engine.seconds + seconds, emulated=emulated, addon_pins=pins)


def _ensure_engine_base(
    *,
    lock: EngineLock,
    ca_bundle: Path | None,
    console: Console,
    wheel_cache: Path,
    repo_root: Path,
) -> LockBase:
    """The engine base alone, as every wheel-lock target without add-ons has always had it."""
    client = docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S)
    arch = lock.platform.split("/", 1)[1]
    emulated = emulation_needed(client, arch)
    tag = base_tag(lock)
    existing = find_lock_base(client, lock)
    if existing is not None:
        console.print(f"base: {tag} ({existing[7:19]}) was built from this lock; reusing it", highlight=False, markup=False, soft_wrap=True)
        return LockBase(tag=tag, id=existing, lock_digest=lock.digest, built=False, seconds=0.0, emulated=emulated)
    start = time.monotonic()
    if emulated:
        console.print(f"base: linux/{arch} on a linux/{daemon_arch(client)} daemon: runs under QEMU user emulation (slow)", highlight=False, markup=False, soft_wrap=True)
    os_base = ensure_os_base(arch=arch, console=console, repo_root=repo_root)
    cache = wheel_cache / arch
    ensure_wheels(lock=lock, os_base=os_base, client=client, ca_bundle=ca_bundle, console=console, cache=cache)
    console.print(f"base: installing {len(lock.entries)} wheels into {LOCK_BASE_VENV} ({lock.engine}, linux/{arch})", highlight=False, markup=False, soft_wrap=True)
    # Everything the install reads is mounted under one folder; its empty mount points are all of it
    # that the committed layer keeps.
    mounts = {
        str(lock.path.resolve()): {"bind": f"{INSTALL_MOUNT}/lock.txt", "mode": "ro"},
        str(cache): {"bind": f"{INSTALL_MOUNT}/wheels", "mode": "ro"},
        str((repo_root / "docker" / "install-lock").resolve()): {"bind": f"{INSTALL_MOUNT}/install-lock", "mode": "ro"},
    }
    total = len(lock.entries)

    def installed(container, lines) -> str:
        if lines and "byte-compiling" in lines[-1]:
            return "byte-compiling the venv (both cores)"
        out = container.exec_run(["sh", "-c", f"ls -d {LOCK_BASE_VENV}/lib/python3*/site-packages/*.dist-info 2>/dev/null | wc -l"])
        count = out.output.decode().strip() if out.exit_code == 0 else "?"
        return f"{count}/{total} packages installed (+ pip of the venv)"

    container, _ = _run(
        client=client, image=os_base, mounts=mounts,
        script=f"sh {INSTALL_MOUNT}/install-lock {INSTALL_MOUNT}/lock.txt {INSTALL_MOUNT}/wheels {LOCK_BASE_VENV} "
        + ("no-compile" if emulated else "compile"),
        env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"}, console=console, what="install-lock", progress=installed,
        network="none",  # everything comes from the hash-checked wheel cache
    )  # fmt: skip
    try:
        console.print(f"base: committing {tag}", highlight=False, markup=False, soft_wrap=True)
        repo, _, tagname = tag.rpartition(":")
        os_id = client.images.get(os_base).id
        image = container.commit(
            repository=repo,
            tag=tagname,
            conf={
                "Env": [f"PATH={_PATH}", "LANG=C.UTF-8", f"VIRTUAL_ENV={LOCK_BASE_VENV}"],
                "Cmd": ["/bin/bash"],
                "Labels": {
                    LABEL_LOCK_DIGEST: lock.digest,
                    LABEL_LOCK_ENGINE: lock.engine,
                    LABEL_OS_BASE: f"{os_base} {os_id}",
                    LABEL_BYTECODE: "on first import (built under QEMU emulation)" if emulated else "compiled at build",
                },
            },
        )
    finally:
        container.remove(force=True)
    seconds = time.monotonic() - start
    console.print(f"base: built {tag} ({image.id[7:19]}) in {seconds:.0f} s" + (" under QEMU emulation" if emulated else ""), highlight=False, markup=False, soft_wrap=True)
    return LockBase(tag=tag, id=image.id, lock_digest=lock.digest, built=True, seconds=seconds, emulated=emulated)


def load_pinned_lock(*, path: Path, digest: str, what: str = "engine lock") -> EngineLock:
    """Read the lock a target pins, refusing one whose bytes changed since it was pinned."""
    lock = read_lock(path)
    if lock.digest != digest:
        raise LockError(
            f"{what} {path} has digest {lock.digest}, but the target pins {digest}",
            hint="the lock changed since it was pinned: review the change, then `builder pin --target T` to pin the new digest",
        )
    return lock


def load_pinned_addons(*, pins: tuple[str, ...] | list[str], engine: EngineLock, repo_root: Path = REPO_ROOT) -> tuple[EngineLock, ...]:
    """Read each add-on lock a target pins (path@sha256), refusing one whose bytes changed since it was
    pinned, one resolved over another engine lock, and one that would reinstall a package pinned before it."""
    addons: list[EngineLock] = []
    owner = {canonicalize_name(e.name): engine.path.name for e in engine.entries}
    for pin in pins:
        rel, _, digest = pin.partition("@")
        addon = load_pinned_lock(path=repo_root / rel, digest=digest, what="add-on lock")
        if addon.engine_lock is None:
            raise LockError(f"{rel} is an engine lock, not an add-on lock over one",
                            hint=f"resolve the add-on: `builder base lock --platform {engine.platform} --addon NAME==VERSION`")
        if not addon.resolved_over(engine) or addon.platform != engine.platform:
            raise LockError(
                f"add-on lock {rel} was resolved over the engine lock {addon.engine_lock} ({addon.platform}), and the target's "
                f"engine lock is {engine.path.name}@{engine.digest} ({engine.platform}): its wheels were chosen for other pins",
                hint=f"resolve it again over the target's engine lock: `builder base lock --platform {engine.platform} --addon {addon.addon}`, "
                "then `builder pin --target T`",
            )
        for e in addon.entries:
            name = canonicalize_name(e.name)
            if name in owner:
                raise LockError(f"add-on lock {rel} pins {e.name}, which {owner[name]} already pins: installing it would replace that pin",
                                hint="resolve the add-on again (`builder base lock --addon`), which leaves out every package already pinned")
            owner[name] = rel
        addons.append(addon)
    return tuple(addons)
