"""The host environment is requirements/host.lock: it satisfies pyproject.toml, `make venv` installs
exactly it, and pip refuses a file whose hash it does not list."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.constants import REPO_ROOT

LOCK = REPO_ROOT / "requirements" / "host.lock"
BUILD_IN = REPO_ROOT / "requirements" / "build.in"
#: Not in the lock, by design: the venv's own installer and the project installed on top of it.
NOT_LOCKED = {"pip", "qfn-int8kv"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def parse_lock(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, sha256 hashes) of a pip-compile style lock."""
    pins: dict[str, tuple[str, set[str]]] = {}
    name = None
    for line in text.splitlines():
        if m := _PIN.match(line):
            name = canonicalize_name(m[1])
            pins[name] = (m[2], set())
        if name:
            pins[name][1].update(_HASH.findall(line))
    return pins


def project_requirements(pyproject: dict, build_in: str) -> list[Requirement]:
    """What the lock must satisfy: the dependencies, the extras make venv installs, the build backend."""
    project = pyproject["project"]
    reqs = [*project["dependencies"], *project["optional-dependencies"]["test"], *project["optional-dependencies"]["models"],
            *pyproject["build-system"]["requires"]]
    reqs += [line.strip() for line in build_in.splitlines() if line.strip() and not line.startswith("#")]
    return [Requirement(r) for r in reqs]


def lock_problems(pyproject: dict, build_in: str, lock_text: str) -> list[str]:
    pins = parse_lock(lock_text)
    problems = []
    for req in project_requirements(pyproject, build_in):
        if req.marker and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req} is not in the lock")
        elif not req.specifier.contains(Version(pins[name][0]), prereleases=True):
            problems.append(f"{req} is not met by the locked {name}=={pins[name][0]}")
    problems += [f"{n}=={v} has no sha256 hash" for n, (v, hashes) in pins.items() if not hashes]
    return problems


def _current() -> tuple[dict, str, str]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text()), BUILD_IN.read_text(), LOCK.read_text()


def test_the_lock_satisfies_every_requirement_of_pyproject():
    problems = lock_problems(*_current())
    assert not problems, "requirements/host.lock is stale; run `make lock` and the tests: " + "; ".join(problems)


def test_a_stale_lock_is_named():
    pyproject, build_in, lock = _current()
    pyproject["project"]["dependencies"].append("pydantic>=99")
    pyproject["project"]["optional-dependencies"]["test"].append("not-a-locked-package-qfn>=1")
    problems = lock_problems(pyproject, build_in, lock)
    assert any(p.startswith("pydantic>=99 is not met by the locked pydantic==") for p in problems)
    assert "not-a-locked-package-qfn>=1 is not in the lock" in problems
    without_hashes = re.sub(r"(?m)^(openai==\S+) \\\n(    --hash=\S+( \\)?\n)+", r"\1\n", lock)
    assert without_hashes != lock
    assert "openai==3.57.0 has no sha256 hash" in lock_problems(_current()[0], build_in, without_hashes)


@pytest.mark.host_lock
def test_the_running_venv_is_exactly_the_lock():
    """Every distribution of this venv, its version and the hash of the file pip installed it from
    (pip's install report, written by `make venv`) are the lock's: nothing extra, missing or other."""
    report_path = Path(sys.prefix) / "install-report.json"
    assert report_path.is_file(), f"no {report_path}: run the tests through `make test` (its venv comes from the lock)"
    pins = parse_lock(LOCK.read_text())
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=[
        p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")])}
    installed = {n: v for n, v in installed.items() if n not in NOT_LOCKED}
    assert installed.keys() == pins.keys(), {"extra": sorted(installed.keys() - pins.keys()), "missing": sorted(pins.keys() - installed.keys())}
    assert {n: v for n, v in installed.items() if Version(v) != Version(pins[n][0])} == {}
    report = json.loads(report_path.read_text())
    taken = {canonicalize_name(i["metadata"]["name"]): i["download_info"]["archive_info"]["hashes"]["sha256"] for i in report["install"]}
    assert taken.keys() == pins.keys()
    assert {n: h for n, h in taken.items() if h not in pins[n][1]} == {}


def _tiny_wheel(folder: Path) -> Path:
    """A real, minimal wheel (one module), so pip has a file whose hash it can check."""
    wheel = folder / "qfn_tiny-1.0-py3-none-any.whl"
    files = {"qfn_tiny.py": b"VALUE = 1\n",
             "qfn_tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: qfn-tiny\nVersion: 1.0\n",
             "qfn_tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for n, d in files.items()) + "qfn_tiny-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr("qfn_tiny-1.0.dist-info/RECORD", record)
    return wheel


def _make_venv(tmp_path: Path, lock_text: str, wheels: Path) -> tuple[subprocess.CompletedProcess, Path]:
    lock = tmp_path / "test.lock"
    lock.write_text(lock_text)
    venv = tmp_path / "venv"
    env = {**os.environ, "PIP_FIND_LINKS": str(wheels)}
    run = subprocess.run(["make", "--no-print-directory", "venv", f"VENV={venv}", f"LOCK={lock}"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    return run, venv


def test_make_venv_refuses_a_file_whose_hash_is_not_in_the_lock(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    good = hashlib.sha256(_tiny_wheel(wheels).read_bytes()).hexdigest()
    run, venv = _make_venv(tmp_path, f"qfn-tiny==1.0 --hash=sha256:{'0' * 64}\n", wheels)
    assert run.returncode != 0
    assert "DO NOT MATCH THE HASHES" in run.stderr and good in run.stderr
    assert not (venv / ".installed").exists() and not list(venv.glob("lib/python*/site-packages/qfn_tiny.py"))
    # The control: the file's own hash installs, and the builder goes on top with the locked backend.
    backend = re.search(r"(?ms)^setuptools==.*?(?=^\S)", LOCK.read_text())[0]
    run, venv = _make_venv(tmp_path, f"qfn-tiny==1.0 --hash=sha256:{good}\n{backend}", wheels)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (venv / ".installed").exists() and list(venv.glob("lib/python*/site-packages/qfn_tiny.py"))


def test_lock_check_names_what_moved(tmp_path):
    """scripts/lock-diff.py, which `make lock-check` runs on the lock and the newest resolution."""
    locked, newest = tmp_path / "locked.txt", tmp_path / "newest.txt"
    locked.write_text("Foo_Bar==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nkeep==2.0\ngone==1.0\n")
    newest.write_text("foo-bar==1.1\nkeep==2.0\nnew-dep==0.3\n")
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "lock-diff.py"), str(locked), str(newest)],
                         capture_output=True, text=True, check=True)
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()[2:]}
    assert "3 package(s) differ" in run.stdout
    assert rows == {"foo-bar": ["1.0", "1.1"], "gone": ["1.0", "-"], "new-dep": ["-", "0.3"]}
    same = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "lock-diff.py"), str(locked), str(locked)],
                          capture_output=True, text=True, check=True)
    assert "are the ones" in same.stdout
