"""`builder pin`: resolve a target's base image tag to its registry digest and write it back."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import tomlkit
from docker.errors import ImageNotFound

from builder.config import parse_config, target_path
from builder.constants import TARGETS_DIR
from builder.errors import ConfigError, ImagePinError
from builder.image.daemon import docker_client


def pin_target(*, target: str, targets_dir: Path = TARGETS_DIR) -> str:
    """Pin ``target.base_image`` to ``name@sha256:...`` via the local daemon; return the new reference.

    Comments and layout of the target file are kept (tomlkit); the result is validated before it
    replaces the file.
    """
    path = target_path(target, targets_dir=targets_dir)
    if not path.is_file():
        raise ConfigError(f"target '{target}' not found ({path})", hint="pass a target name from targets/ or a .toml path")
    doc = tomlkit.parse(path.read_text())
    ref = str(doc["target"]["base_image"])
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
    pinned = digests[0]
    doc["target"]["base_image"] = pinned
    text = tomlkit.dumps(doc)
    parse_config(tomlkit.parse(text).unwrap(), source=str(path))  # never write a file that no longer loads
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return pinned


def _repository(name: str) -> str:
    """Strip the tag: 'host:5000/a/b:tag' -> 'host:5000/a/b' (a registry port is not a tag)."""
    head, sep, tail = name.rpartition(":")
    return head if sep and "/" not in tail else name
