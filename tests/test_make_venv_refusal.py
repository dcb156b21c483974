"""`make venv` refuses an interpreter or machine the host lock does not cover before anything is
installed or cleared, saying what it found, what is supported and the fix."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from builder.constants import REPO_ROOT


def _make_venv(tmp_path, *overrides: str) -> tuple[subprocess.CompletedProcess, object]:
    venv = tmp_path / "venv"
    venv.mkdir()
    keep = venv / "earlier-venv-file"
    keep.write_text("kept\n")
    done = subprocess.run(["make", "-s", "venv", f"VENV={venv}", *overrides], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    return done, keep


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["LOCK_PYTHON=3.99"], ["resolved for CPython 3.99 on linux", f"found cpython {sys.version_info[0]}.{sys.version_info[1]}",
                                "Fix: install CPython 3.99 and run: PY=python3.99 make venv"]),
        (["LOCK_PLATFORM=riscv64-manylinux_2_28"], ["on linux riscv64", "Fix: run the builder on a linux riscv64 host"]),
        (["PY=python3-not-installed"], ["PY=python3-not-installed does not run here", "PY=python3.11 make venv"]),
    ],
    ids=["other-python", "other-machine", "no-interpreter"],
)
def test_an_uncovered_host_is_refused_with_the_fix_and_nothing_is_touched(tmp_path, overrides, said):
    done, keep = _make_venv(tmp_path, *overrides)
    assert done.returncode == 2, done.stdout + done.stderr
    for text in said:
        assert text in done.stderr
    assert "Nothing was installed" in done.stderr
    assert keep.read_text() == "kept\n" and sorted(p.name for p in keep.parent.iterdir()) == [keep.name]


def test_the_interpreter_the_lock_is_for_passes_the_check():
    lock_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    done = subprocess.run([sys.executable, "scripts/check-host.py", "--lock", "requirements/host.lock", "--python", lock_python,
                           "--platform", "x86_64-manylinux_2_28"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == (0 if platform.machine() == "x86_64" else 2), done.stderr
