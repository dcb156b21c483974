"""Pack the engine lock's Triton for the H200 device, whose own Triton (3.6.0) is not the images' (3.8.0).

A kernel number taken under the device's Triton does not hold for the images: the images'
compiler spills the int8 kernel where the device's does not (evidence/kernels/triton38/).
This packs the Triton version docker/locks pins, as the cp312 wheel the device's Python
imports, trimmed so that it and the repository fit the 64 MiB one run may send: no AMD backend, no
profiler (proton, CUPTI), no Blackwell ptxas or disassemblers, no CUDA headers but cuda.h,
libtriton stripped.
`benchmarks/kernels/evidence.sh` unpacks it when QFN_QSA_TRITON_ARCHIVE names it.

    python -m benchmarks.kernels.device_triton --out .dev/t38/triton.tar.xz      # fetches the wheel (PyPI)
    python -m benchmarks.kernels.device_triton --wheel triton-3.8.0-cp312-....whl --out ...
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from builder.hashing import sha256_file

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "docker" / "locks" / "vllm-0.33.0-linux-amd64.txt"
#: The H200 host's Python: the wheel must be built for it, not for the lock's 3.11.
DEVICE_PYTHON = "3.12"
DEVICE_ABI = "cp" + DEVICE_PYTHON.replace(".", "")
PLATFORM = "manylinux_2_27_x86_64"
#: Members the kernels never load on an H200 (sm_90, no profiling), by path prefix inside the wheel.
DROP_PREFIXES = (
    "triton/backends/amd/",
    "triton/backends/nvidia/lib/cupti/",
    "triton/backends/nvidia/lib/cupti-blackwell/",
    "triton/backends/nvidia/bin/ptxas-blackwell",
    "triton/backends/nvidia/bin/nvdisasm",
    "triton/backends/nvidia/bin/cuobjdump",
    "triton/_C/libproton.so",
    "triton/instrumentation/libGPUInstrumentationTestLib.so",
    "triton/plugins/",
    "triton/FileCheck",
    # CUDA's headers: Triton compiles its driver stub against cuda.h alone (kept below).
    "triton/backends/nvidia/include/",
)
#: Exceptions to DROP_PREFIXES.
KEEP = ("triton/backends/nvidia/include/cuda.h",)
#: Wheels store no exec bits that zipfile restores: these must run on the device.
EXECUTABLE_PREFIX = "triton/backends/nvidia/bin/"
LIBTRITON = "triton/_C/libtriton.so"
#: x86 branch conversion first (libtriton and ptxas are most of the bytes), then LZMA2 with a dictionary
#: as large as libtriton. Plain `xz -d` unpacks it.
XZ_FILTERS = ({"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 192 << 20})
#: What one command of a remote runner may upload; the repository's tracked files travel in it too.
UPLOAD_LIMIT_BYTES = 64 << 20


class PackError(SystemExit):
    """A refusal naming what to fix (exits non-zero with the message)."""


def lock_pin(lock: Path) -> str:
    """The triton version ``lock`` pins; refuses a lock that pins none or several."""
    pins = set(re.findall(r"^triton==([0-9][^\s]*)\s", lock.read_text(), flags=re.MULTILINE))
    if len(pins) != 1:
        raise PackError(f"--lock {lock}: expected one 'triton==' pin, found {sorted(pins) or 'none'}; "
                        "pass the engine lock (docker/locks/vllm-*-linux-amd64.txt)")
    return pins.pop()


def repo_bytes() -> int:
    """Bytes of the repository's tracked files, which travel to the GPU host beside the archive on every run."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    return sum((ROOT / name).stat().st_size for name in listed.decode().split("\0") if name and (ROOT / name).is_file())


def fetch_wheel(version: str, dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", DEVICE_PYTHON, "--platform", PLATFORM, "--dest", str(dest),
                    f"triton=={version}"], check=True)
    wheels = sorted(dest.glob(f"triton-{version}-*.whl"))
    if len(wheels) != 1:
        raise PackError(f"pip download left {[w.name for w in wheels]} in {dest}, expected one triton-{version} wheel")
    return wheels[0]


def _strip(data: bytes) -> bytes:
    """``strip --strip-unneeded`` of an ELF file (debug symbols are most of libtriton's size)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(data)
        subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
        return path.read_bytes()


def pack(*, wheel: Path, version: str, out: Path) -> dict:
    """Write the trimmed archive to ``out`` (via a temp file, renamed); return its manifest."""
    if not wheel.name.startswith(f"triton-{version}-{DEVICE_ABI}-"):
        raise PackError(f"--wheel {wheel.name}: the lock pins triton {version} and the device runs Python "
                        f"{DEVICE_PYTHON}; pass triton-{version}-{DEVICE_ABI}-*.whl or omit --wheel")
    dropped: list[str] = []
    kept = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(wheel) as zf, lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, filters=XZ_FILTERS) as xz, \
            tarfile.open(fileobj=xz, mode="w") as tar:
        for info in zf.infolist():
            if info.is_dir():
                continue
            if info.filename.startswith(DROP_PREFIXES) and info.filename not in KEEP:
                dropped.append(info.filename)
                continue
            data = zf.read(info)
            if info.filename == LIBTRITON:
                data = _strip(data)
            member = tarfile.TarInfo(info.filename)
            member.size = len(data)
            member.mode = 0o755 if info.filename.startswith(EXECUTABLE_PREFIX) else 0o644
            member.mtime = 0
            tar.addfile(member, io.BytesIO(data))
            kept += 1
    size, repo = tmp.stat().st_size, repo_bytes()
    if size + repo > UPLOAD_LIMIT_BYTES:
        tmp.unlink()
        raise PackError(f"the trimmed archive ({size / 2**20:.1f} MiB) and the repository's tracked files "
                        f"({repo / 2**20:.1f} MiB) exceed one command's {UPLOAD_LIMIT_BYTES >> 20} MiB upload: "
                        "add what the kernels do not load to DROP_PREFIXES")
    tmp.replace(out)
    manifest = {"wheel": wheel.name, "wheel_sha256": sha256_file(wheel),
                "archive_bytes": size, "repo_bytes_when_packed": repo, "members": kept, "dropped": dropped}
    out.with_name(out.name + ".json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=LOCK, help="the engine lock whose triton pin is packed")
    parser.add_argument("--wheel", type=Path, help="a downloaded cp312 wheel of that version (default: pip download)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    version = lock_pin(args.lock)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or fetch_wheel(version, Path(tmp))
        manifest = pack(wheel=wheel, version=version, out=args.out)
    print(f"{args.out}: triton {version} from {manifest['wheel']} ({manifest['archive_bytes'] >> 20} MiB, "
          f"{manifest['members']} files, {len(manifest['dropped'])} dropped)")


if __name__ == "__main__":
    main()
