"""Copy a file out of a built image (no container is started) and write it atomically."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import docker
from docker.errors import NotFound

from builder.errors import DockerError


def extract_file(*, client: docker.DockerClient, image: str, path: str, dest: Path) -> Path:
    container = client.containers.create(image, command=["true"], entrypoint=[])
    try:
        try:
            stream, _ = container.get_archive(path)
        except NotFound as exc:
            raise DockerError(f"{path} is not in image {image}", hint="the build step that writes it did not run") from exc
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            fh = tar.extractfile(member) if member is not None else None
            if fh is None:
                raise DockerError(f"{path} in image {image} is not a regular file")
            data = fh.read()
    finally:
        container.remove(force=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, dest)
    return dest
