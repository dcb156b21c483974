"""The preload an arm64 image is built with under QEMU on an x86_64 host (docker/emulation/hide-host-cpu-caches.c).

The shim is plain C, so CI compiles it for the host and checks what it hides and what it leaves
alone; the crash it prevents (aarch64 torch's cpuinfo under QEMU) is reproduced in
evidence/images/gb10/cpuinfo-under-qemu.txt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.constants import EMULATION_PRELOAD, REPO_ROOT
from builder.image import build_recipe
from builder.image.build import build_args

SOURCE = REPO_ROOT / "docker" / "emulation" / "hide-host-cpu-caches.c"
CACHE_FILE = Path("/sys/devices/system/cpu/cpu0/cache/index0/level")


def test_only_an_emulated_build_gets_the_preload(pinned):
    recipe = build_recipe(pinned("gb10")).with_base(image_id="sha256:" + "c" * 64, name="base")
    assert build_args(recipe, emulated=True)["QFN_EMULATION_PRELOAD"] == EMULATION_PRELOAD
    assert "QFN_EMULATION_PRELOAD" not in build_args(recipe, emulated=False)
    assert build_args(recipe, emulated=False) == recipe.buildargs


def test_the_dockerfile_builds_the_preload_where_the_builder_points(pinned):
    """Stage 1 compiles the shim to the path the builder passes and preloads it from then on."""
    text = (REPO_ROOT / "Dockerfile").read_text()
    stage1 = text.split("FROM ${BASE_IMAGE} AS engine", 1)[1].split("\nFROM ", 1)[0]
    assert 'ARG QFN_EMULATION_PRELOAD=""' in stage1
    assert "ENV LD_PRELOAD=${QFN_EMULATION_PRELOAD}" in stage1
    # Before the first step that imports torch.
    assert stage1.index("ENV LD_PRELOAD=") < stage1.index("RUN install-engine")
    assert "COPY docker/emulation/hide-host-cpu-caches.c /qfn-overlay" + str(Path(EMULATION_PRELOAD).parent) + "/" in stage1


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this host")
    out = tmp_path_factory.mktemp("shim") / "hide.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(out), str(SOURCE), "-ldl"], check=True)
    return out


def _run(shim: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, env={**os.environ, "LD_PRELOAD": str(shim)}, capture_output=True, text=True)


@pytest.mark.skipif(not CACHE_FILE.exists(), reason="this host has no sysfs cache description")
def test_the_shim_hides_the_hosts_cpu_cache_files_from_open_and_fopen(shim):
    assert subprocess.run(["cat", str(CACHE_FILE)], capture_output=True).returncode == 0  # the control
    opened = _run(shim, "cat", str(CACHE_FILE))
    assert opened.returncode != 0 and "No such file or directory" in opened.stderr
    code = f"import sys\ntry:\n    open({str(CACHE_FILE)!r})\nexcept FileNotFoundError:\n    sys.exit(3)"
    assert _run(shim, "python3", "-c", code).returncode == 3  # openat, as CPython opens files


def test_the_shim_leaves_every_other_path_alone(shim, tmp_path):
    assert _run(shim, "cat", "/sys/devices/system/cpu/online").returncode == 0
    made = tmp_path / "made.txt"
    # O_CREAT with a mode: the shim must pass the third argument through.
    result = _run(shim, "sh", "-c", f"umask 022; echo hi > {made}; cat {made}")
    assert result.returncode == 0 and result.stdout == "hi\n"
    assert made.stat().st_mode & 0o777 == 0o644
