"""benchmarks.kernels.device_triton: the images' Triton, packed for the H200 device, on a small wheel of the
same layout (the real one is 248 MB and comes from PyPI)."""

from __future__ import annotations

import json
import lzma
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from benchmarks.kernels import device_triton
from builder.constants import REPO_ROOT

WHEEL = "triton-3.8.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"


def _elf() -> bytes:
    """A real shared object with a symbol table, so strip has something to remove."""
    import _ctypes

    return Path(_ctypes.__file__).read_bytes()


def _wheel(tmp_path: Path, name: str = WHEEL) -> Path:
    wheel = tmp_path / name
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("triton/__init__.py", "__version__ = '3.8.0'\n")
        zf.writestr("triton/_C/libtriton.so", _elf())
        zf.writestr("triton/_C/libproton.so", b"\x7fELF proton")
        zf.writestr("triton/backends/nvidia/bin/ptxas", b"#!/bin/sh\n")
        zf.writestr("triton/backends/nvidia/bin/ptxas-blackwell", b"#!/bin/sh\n")
        zf.writestr("triton/backends/nvidia/lib/libdevice.10.bc", b"bc")
        zf.writestr("triton/backends/nvidia/lib/cupti/libcupti.so", b"cupti")
        zf.writestr("triton/backends/nvidia/include/cuda.h", b"/* kept: Triton's driver stub includes it */")
        zf.writestr("triton/backends/nvidia/include/cupti_activity.h", b"/* dropped */")
        zf.writestr("triton/backends/amd/compiler.py", "")
        zf.writestr("triton/plugins/libTritonPluginsTestLib.so", b"x")
        zf.writestr("triton-3.8.0.dist-info/METADATA", "Name: triton\n")
    return wheel


def _members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with lzma.open(archive) as xz, tarfile.open(fileobj=xz) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_pack_keeps_what_the_kernels_load_and_makes_ptxas_executable(tmp_path):
    if shutil.which("strip") is None:
        pytest.skip("make test installs binutils (scripts/host-setup.sh)")
    out = tmp_path / "upload" / "triton.tar.xz"
    manifest = device_triton.pack(wheel=_wheel(tmp_path), version="3.8.0", out=out)
    members = _members(out)
    assert set(members) == {
        "triton/__init__.py", "triton/_C/libtriton.so", "triton/backends/nvidia/bin/ptxas",
        "triton/backends/nvidia/lib/libdevice.10.bc", "triton/backends/nvidia/include/cuda.h",
        "triton-3.8.0.dist-info/METADATA",
    }
    # zipfile drops the wheel's exec bits: without 0755 Triton's compile fails on the device.
    assert members["triton/backends/nvidia/bin/ptxas"].mode == 0o755
    assert members["triton/__init__.py"].mode == 0o644
    assert 0 < members["triton/_C/libtriton.so"].size < len(_elf())  # stripped, still there
    assert set(manifest["dropped"]) == {
        "triton/_C/libproton.so", "triton/backends/nvidia/bin/ptxas-blackwell",
        "triton/backends/nvidia/lib/cupti/libcupti.so", "triton/backends/amd/compiler.py",
        "triton/plugins/libTritonPluginsTestLib.so", "triton/backends/nvidia/include/cupti_activity.h",
    }
    written = json.loads((out.parent / "triton.tar.xz.json").read_text())
    assert written["wheel"] == WHEEL and len(written["wheel_sha256"]) == 64
    assert sorted(p.name for p in out.parent.iterdir()) == ["triton.tar.xz", "triton.tar.xz.json"]


def test_pack_refuses_a_wheel_the_device_cannot_import(tmp_path):
    out = tmp_path / "triton.tar.xz"
    for name, version in ((WHEEL.replace("cp312", "cp311"), "3.8.0"), (WHEEL, "3.9.0")):
        with pytest.raises(SystemExit, match=r"--wheel .*pass triton-3\.[89]\.0-cp312"):
            device_triton.pack(wheel=_wheel(tmp_path, name), version=version, out=out)
    assert list(tmp_path.glob("*.xz*")) == []


def test_pack_refuses_an_archive_too_big_for_one_call_and_leaves_nothing(tmp_path, monkeypatch):
    if shutil.which("strip") is None:
        pytest.skip("make test installs binutils (scripts/host-setup.sh)")
    # The archive of the small wheel is a few KB: a repository 100 bytes short of the limit leaves no room.
    monkeypatch.setattr(device_triton, "repo_bytes", lambda: device_triton.UPLOAD_LIMIT_BYTES - 100)
    out = tmp_path / "upload" / "triton.tar.xz"
    with pytest.raises(SystemExit, match=r"and the repository's tracked files \(64.0 MiB\) exceed one command's 64 MiB"):
        device_triton.pack(wheel=_wheel(tmp_path), version="3.8.0", out=out)
    assert list(out.parent.iterdir()) == []


def test_the_repository_size_is_its_tracked_files():
    # What the remote runner uploads with every command; CHECKSUMS.sha256 is one tracked file of many.
    assert device_triton.repo_bytes() > (REPO_ROOT / "CHECKSUMS.sha256").stat().st_size


def test_the_pin_comes_from_the_engine_lock(tmp_path):
    assert device_triton.lock_pin(device_triton.LOCK) == "3.8.0"
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==2.14.0 --hash=sha256:aa\n")
    with pytest.raises(SystemExit, match="--lock .*found none"):
        device_triton.lock_pin(lock)
    lock.write_text("triton==3.8.0 --hash=sha256:aa\ntriton==3.9.0 --hash=sha256:bb\n")
    with pytest.raises(SystemExit, match=r"found \['3.8.0', '3.9.0'\]"):
        device_triton.lock_pin(lock)
