"""evidence/images/<target>/: what one image build showed, for people to compare and check.

build.json (times, size, layers, base, emulation), labels.json (as `docker image inspect` shows
them), selfcheck.txt (the in-image self-check's output) and build-log-tail.txt; a GPU image's AOT
kernel compile report goes to evidence/kernels/ beside the kernel benchmarks. Each file is written
to a temp file and renamed into place.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from builder.image.build import BuiltImage

LOG_TAIL_LINES = 120


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_image_evidence(
    *, built: BuiltImage, target: str, base_pin: str, base_source: str, out_dir: Path, kernels_dir: Path
) -> list[Path]:
    summary = {
        "target": target,
        "tag": built.tag,
        "image_id": built.id,
        "platform": built.platform,
        "built_under_qemu_emulation": built.emulated,
        "base_source": base_source,
        "base_pin": base_pin,
        "seconds": {
            "base_from_lock": round(built.base_seconds, 1),
            "docker_build": round(built.seconds, 1),
            "selfcheck": round(built.selfcheck_seconds, 1),
        },
        "size_bytes": built.size_bytes,
        "size_gb": round(built.size_bytes / 1e9, 2),
        "layers": built.layers,
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "note": "base_from_lock is 0 when an existing base built from the same lock digest was reused",
    }
    files = {
        "build.json": json.dumps(summary, indent=2) + "\n",
        "labels.json": json.dumps(dict(sorted(built.labels.items())), indent=2) + "\n",
        "build-log-tail.txt": "\n".join(built.log[-LOG_TAIL_LINES:]) + "\n",
    }
    if built.selfcheck_output is not None:
        files["selfcheck.txt"] = built.selfcheck_output
    written = []
    for name, text in files.items():
        _write(out_dir / name, text)
        written.append(out_dir / name)
    if built.kernel_report is not None:
        _write(kernels_dir / built.kernel_report.name, built.kernel_report.read_text())
        written.append(kernels_dir / built.kernel_report.name)
    return written
