"""The image's shell scripts and the base-image scripts pass shellcheck (they run in /bin/sh on
Debian minbase and on the vLLM bases, so portability bugs surface only at build time)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from builder.constants import REPO_ROOT

SCRIPTS = sorted(p for p in (REPO_ROOT / "docker").iterdir() if p.is_file()) + [
    REPO_ROOT / "scripts/build-base-image.sh",
    REPO_ROOT / "scripts/host-setup.sh",
    REPO_ROOT / "scripts/local-registry.sh",
]
#: docker/supervise (PID 1 needs signal handling a shell does badly) and docker/vllm-metadata (reads
#: importlib.metadata as vLLM does) are Python; each has its own tests.
SHELL_SCRIPTS = [p for p in SCRIPTS if p.read_text().split("\n", 1)[0] in ("#!/bin/sh", "#!/usr/bin/env bash", "#!/bin/bash")]


def test_every_image_script_is_shell_or_tested_python():
    assert {p.name for p in SCRIPTS} - {p.name for p in SHELL_SCRIPTS} == {"supervise", "vllm-metadata"}


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="make test installs shellcheck (scripts/host-setup.sh)")
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script):
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", [p for p in SCRIPTS if p.parent.name == "docker"], ids=lambda p: p.name)
def test_image_scripts_are_executable(script):
    assert script.stat().st_mode & 0o111, f"{script} must be executable: COPY keeps the mode"
