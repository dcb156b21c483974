#!/usr/bin/env python3
"""Write a one-layer `docker load` archive of a rootfs to stdout, with the architecture set.

Used for foreign-arch OS bases: `docker import --platform` is ignored by a non-experimental
daemon, and an image that claims the wrong arch makes every image built on it claim it too.
usage: oci-archive.py --rootfs DIR --arch arm64 --tag NAME:TAG [--env K=V ...] [--cmd PROG]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    out.addfile(info, io.BytesIO(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--arch", required=True, choices=["amd64", "arm64"])
    ap.add_argument("--tag", required=True)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--cmd", action="append", default=[])
    args = ap.parse_args()

    with tempfile.TemporaryFile() as layer:
        # GNU tar, as `docker import` is fed: owners, modes, links and device nodes kept.
        subprocess.run(["tar", "-C", args.rootfs, "--numeric-owner", "-c", "."], stdout=layer, check=True)
        layer.seek(0)
        digest = hashlib.sha256()
        size = 0
        while chunk := layer.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        diff_id = "sha256:" + digest.hexdigest()
        config = {
            "architecture": args.arch,
            "os": "linux",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {"Env": args.env, "Cmd": args.cmd or None},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": f"debootstrap rootfs ({args.arch}), scripts/oci-archive.py"}],
        }
        config_bytes = json.dumps(config, separators=(",", ":")).encode()
        config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
        layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
        manifest = [{"Config": config_name, "RepoTags": [args.tag], "Layers": [layer_name]}]
        with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as out:
            _add_bytes(out, config_name, config_bytes)
            _add_bytes(out, "manifest.json", json.dumps(manifest).encode())
            layer.seek(0)
            info = tarfile.TarInfo(layer_name)
            info.size = size
            info.mtime = int(time.time())
            out.addfile(info, layer)


if __name__ == "__main__":
    main()
