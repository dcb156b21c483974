"""The GPU host's side of the chunked transport, stdlib only: land the pieces a command sent, check
them, unpack the components they complete.

A command sends some of the pieces named in manifest.json. Each landed piece is checked against
its sha256 and kept under the state dir (outside the repo copy, so it survives while the machine
stays warm); a component whose bytes are all landed is reassembled, checked against its sha256
and unpacked. Runs before any sent wheel is installed, so it imports nothing outside the
standard library.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

from builder.hashing import sha256_file  # stdlib only, like this module

#: Where each component unpacks, relative to the state dir.
DESTINATIONS = {
    "tokenizer.tar.xz": "tokenizer",
    "wheels.tar": "wheels",
    "engine-tree.tar.xz": "engine",
    "engine-libs.tar.xz": "engine",
    "graphs-wheels.tar": "graphs-wheels",
    "triton.tar.xz": "triton-lock",
}


class LandError(RuntimeError):
    """A piece sent or a reassembled component does not match the manifest."""


def land_pieces(*, manifest: dict, sent: Path, state: Path) -> list[str]:
    """Copy the pieces found in `sent` into state/pieces after checking each sha256."""
    dest = state / "pieces"
    dest.mkdir(parents=True, exist_ok=True)
    landed = []
    for piece in manifest["pieces"]:
        src = sent / piece["name"]
        if not src.is_file():
            continue
        got = sha256_file(src)
        if got != piece["sha256"] or src.stat().st_size != piece["size"]:
            raise LandError(f"{piece['name']}: sha256 {got} size {src.stat().st_size}, manifest says "
                            f"{piece['sha256']} size {piece['size']}; send it again")
        shutil.copyfile(src, dest / piece["name"])
        landed.append(piece["name"])
    return landed


def _landed(manifest: dict, state: Path) -> list[dict]:
    return [p for p in manifest["pieces"] if (state / "pieces" / p["name"]).is_file()]


def _covered(component: dict, pieces: list[dict]) -> bool:
    start, end = component["offset"], component["offset"] + component["size"]
    for p in sorted(pieces, key=lambda p: p["offset"]):
        if p["offset"] <= start < p["offset"] + p["size"]:
            start = p["offset"] + p["size"]
        if start >= end:
            return True
    return start >= end


def _reassemble(component: dict, pieces: list[dict], state: Path, out: Path) -> None:
    start, end = component["offset"], component["offset"] + component["size"]
    with out.open("wb") as sink:
        for p in sorted(pieces, key=lambda p: p["offset"]):
            lo, hi = max(start, p["offset"]), min(end, p["offset"] + p["size"])
            if lo >= hi:
                continue
            with (state / "pieces" / p["name"]).open("rb") as src:
                src.seek(lo - p["offset"])
                remaining = hi - lo
                while remaining:
                    block = src.read(min(remaining, 1 << 22))
                    sink.write(block)
                    remaining -= len(block)


def unpack_ready(*, manifest: dict, state: Path) -> list[str]:
    """Unpack every component whose pieces have all landed and that is not unpacked yet."""
    pieces = _landed(manifest, state)
    done_dir = state / "unpacked"
    done_dir.mkdir(parents=True, exist_ok=True)
    unpacked = []
    for comp in manifest["components"]:
        stamp = done_dir / comp["name"]
        if stamp.is_file() and stamp.read_text().strip() == comp["sha256"]:
            continue
        if not _covered(comp, pieces):
            continue
        blob = state / "components" / comp["name"]
        blob.parent.mkdir(parents=True, exist_ok=True)
        _reassemble(comp, pieces, state, blob)
        got = sha256_file(blob)
        if got != comp["sha256"]:
            raise LandError(f"{comp['name']}: reassembled sha256 {got}, manifest says {comp['sha256']}")
        dest = state / DESTINATIONS[comp["name"]]
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(blob) as tar:
            tar.extractall(dest, filter="data")
        blob.unlink()
        stamp.write_text(comp["sha256"] + "\n")
        unpacked.append(comp["name"])
    return unpacked


def status(*, manifest: dict, state: Path) -> dict:
    done = state / "unpacked"
    return {
        "pieces_landed": [p["name"] for p in _landed(manifest, state)],
        "pieces_total": len(manifest["pieces"]),
        "components_total": len(manifest["components"]),
        "components_unpacked": sorted(p.name for p in done.iterdir()) if done.is_dir() else [],
    }


def read_manifest(path: Path) -> dict:
    return json.loads(path.read_text())
