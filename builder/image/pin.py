"""`builder pin`: resolve a target's base image tag to its registry digest, or its locks to their file
digests, and write them back."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath

import tomlkit
from docker.errors import ImageNotFound

from builder.config import parse_config, target_path
from builder.constants import REPO_ROOT, TARGETS_DIR
from builder.errors import ConfigError, ImagePinError
from builder.image.daemon import docker_client
from builder.image.lock import EngineLock, read_lock


def pin_target(*, target: str, targets_dir: Path = TARGETS_DIR, source: str | None = None, repo_root: Path = REPO_ROOT) -> str:
    """Pin the target's base (``source`` switches base_source first) and return the pinned reference.

    image: ``target.base_image`` resolved to ``name@sha256:...`` via the local daemon.
    wheel-lock: ``target.base_lock`` pinned to ``path@sha256:<digest of the lock file>``, and each of
    ``target.addon_locks`` likewise, once it is shown to be an add-on lock over that engine lock.
    Comments and layout of the target file are kept (tomlkit); the result is validated before it
    replaces the file.
    """
    path = target_path(target, targets_dir=targets_dir)
    if not path.is_file():
        raise ConfigError(f"target '{target}' not found ({path})", hint="pass a target name from targets/ or a .toml path")
    doc = tomlkit.parse(path.read_text())
    table = doc["target"]
    if source is not None:
        table["base_source"] = source
    if str(table.get("base_source", "image")) == "wheel-lock":
        pinned = _pin_lock(table, path, repo_root)
    else:
        if "base_lock" in table:
            del table["base_lock"]
        pinned = _pin_image(table, path)
    text = tomlkit.dumps(doc)
    parse_config(tomlkit.parse(text).unwrap(), source=str(path))  # never write a file that no longer loads
    if text != path.read_text():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return pinned


def _pin_lock(table, path: Path, repo_root: Path) -> str:
    ref = str(table.get("base_lock") or "")
    if not ref:
        raise ImagePinError(
            f"{path.name}: base_source is wheel-lock but target.base_lock is not set",
            hint='set base_lock = "docker/locks/<engine>-linux-<arch>.txt" (see docker/locks/), then rerun pin',
        )
    rel = ref.split("@", 1)[0]
    lock = repo_root / rel
    if not lock.is_file():
        raise ImagePinError(f"{rel} (target.base_lock of {path.name}) does not exist", hint="generate it: `builder base lock --platform P`")
    engine = read_lock(lock)  # refuses a malformed lock
    pinned = f"{rel}@{engine.digest}"
    table["base_lock"] = pinned
    addons = table.get("addon_locks")
    for i, ref in enumerate(list(addons or [])):
        addons[i] = _pin_addon(str(ref), index=i, engine=engine, path=path, repo_root=repo_root)
    return pinned


def _pin_addon(ref: str, *, index: int, engine: EngineLock, path: Path, repo_root: Path) -> str:
    """``path@sha256:<digest>`` of an add-on lock, refused unless it was resolved over ``engine``."""
    rel = ref.split("@", 1)[0]
    field = f"target.addon_locks[{index}] of {path.name}"
    if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts or not (repo_root / rel).is_file():
        raise ImagePinError(f"{rel} ({field}) is not a file of the repository",
                            hint=f"resolve it: `builder base lock --platform {engine.platform} --addon NAME==VERSION`")
    addon = read_lock(repo_root / rel)
    if addon.engine_lock is None:
        raise ImagePinError(f"{rel} ({field}) is an engine lock, not an add-on lock over one",
                            hint=f"resolve the add-on: `builder base lock --platform {engine.platform} --addon NAME==VERSION`")
    if not addon.resolved_over(engine):
        raise ImagePinError(
            f"{rel} ({field}) was resolved over the engine lock {addon.engine_lock}, and target.base_lock is "
            f"{engine.path.name}@{engine.digest}: its wheels were chosen for other engine pins",
            hint=f"resolve it again over this engine lock: `builder base lock --platform {engine.platform} --addon {addon.addon}`",
        )
    return f"{rel}@{addon.digest}"


def _pin_image(table, path: Path) -> str:
    ref = str(table["base_image"])
    name = ref.split("@", 1)[0]
    repo = _repository(name)
    client = docker_client()
    if "@" in ref:  # already pinned: only check that this host has exactly that image
        try:
            client.images.get(ref)
        except ImageNotFound as exc:
            raise ImagePinError(
                f"{ref} (target.base_image of {path.name}) is pinned but not on this host",
                hint=f"`docker pull {ref}`, or set base_image back to a tag and rerun pin",
            ) from exc
        return ref
    try:
        image = client.images.get(name)
    except ImageNotFound as exc:
        raise ImagePinError(
            f"base image {name} (target.base_image of {path.name}) is not on this host",
            hint=f"`docker pull {name}` first (for cpu-smoke: `bash scripts/build-base-image.sh`), then rerun pin",
        ) from exc
    digests = [d for d in image.attrs.get("RepoDigests") or [] if d.split("@", 1)[0] == repo]
    if not digests:
        raise ImagePinError(
            f"{name} has no registry digest (a locally built or imported image has none)",
            hint="push it to a registry (`bash scripts/local-registry.sh` starts one on 127.0.0.1:5000), "
            "re-tag base_image to that registry, then rerun pin",
        )
    table["base_image"] = digests[0]
    return digests[0]


def _repository(name: str) -> str:
    """Strip the tag: 'host:5000/a/b:tag' -> 'host:5000/a/b' (a registry port is not a tag)."""
    head, sep, tail = name.rpartition(":")
    return head if sep and "/" not in tail else name
