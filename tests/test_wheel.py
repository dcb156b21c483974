"""The builder installs as a wheel and works outside a checkout: the target files, the patch series,
the templates and the streaming client travel in it as package data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

from builder.constants import REPO_ROOT, TARGETS_DIR


def test_an_installed_wheel_renders_a_target_outside_the_checkout(tmp_path):
    # Built from a copy of what the wheel is made of: setuptools writes build/ beside its sources.
    src = tmp_path / "src"
    for rel in ("builder", "targets", "bundle/patches"):
        shutil.copytree(REPO_ROOT / rel, src / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO_ROOT / "pyproject.toml", src / "pyproject.toml")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
                            str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = tmp_path.glob("qfn_int8kv-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "builder").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert data <= names, sorted(data - names)  # every file of the package, templates and data included
    assert {"builder/_release/patches/series", "builder/_release/patches/qsa-int8.diff"} <= names
    assert {f"builder/_release/targets/{p.name}" for p in TARGETS_DIR.glob("*.toml")} <= names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True,
                   capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The installed copy first on the path, this venv's dependencies behind it; no checkout in reach.
    env = {k: v for k, v in os.environ.items() if k != "QFN_REPO_ROOT"} | {"PYTHONPATH": str(site)}

    def render(out: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "builder", "render", "--target", "gb10", "--out", out],
                              cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)

    done = render("r")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (elsewhere / "r" / "launch" / "run_qsa_int8kv.sh").is_file() and (elsewhere / "r" / "README.md").is_file()
    probe = subprocess.run([sys.executable, "-c", "import builder; print(builder.__file__)"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(site))
    # Control: the same install without its release data cannot read the target's patch series.
    shutil.rmtree(site / "builder" / "_release")
    assert render("r2").returncode != 0
