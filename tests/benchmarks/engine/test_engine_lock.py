"""The runtime wheel lock: parsed strictly, and a wheel is only accepted by its sha256."""

from __future__ import annotations

import hashlib
import importlib.metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from benchmarks.engine.lock import (
    DEVICE_IMAGE_HAS, DRIVER_DISTRIBUTIONS, LOCK_FILE, REQUEST_TIME_PACKAGES, check_wheels, read_lock,
)
from benchmarks.engine.errors import EngineHarnessError


def test_the_committed_lock_pins_every_wheel_once_by_hash():
    locked = read_lock(LOCK_FILE)
    names = {w.name.lower().replace("-", "_") for w in locked}
    # what the server, engine core and routers import that the H200 image lacks (found on CPU)
    for needed in ("pydantic", "pydantic_core", "fastapi", "starlette", "uvicorn", "openai", "msgspec", "pyzmq",
                   "cbor2", "xgrammar", "apache_tvm_ffi", "llguidance", "compressed_tensors",
                   "prometheus_fastapi_instrumentator", "tenacity", "docker"):
        assert needed in names, needed
    # the image's own GPU stack is never carried over it
    assert not names & {"torch", "triton", "transformers", "numpy", "tokenizers"}


def unmet_requirements(locked, distribution: str) -> set[str]:
    """distribution's unconditional requirements that neither the lock nor the device image holds."""
    have = {canonicalize_name(w.name) for w in locked} | {canonicalize_name(n) for n in DEVICE_IMAGE_HAS}
    needs = {canonicalize_name(Requirement(r).name) for r in importlib.metadata.requires(distribution) or ()
             if Requirement(r).marker is None}
    return needs - have


@pytest.mark.parametrize("distribution", DRIVER_DISTRIBUTIONS)
def test_the_lock_closes_what_the_driver_itself_imports(distribution):
    locked = read_lock(LOCK_FILE)
    pinned = {canonicalize_name(w.name): w.version for w in locked}
    # the installed metadata stands for the locked wheel's only when the versions agree
    assert pinned[canonicalize_name(distribution)] == importlib.metadata.version(distribution)
    assert unmet_requirements(locked, distribution) == set()


def test_a_lock_without_a_driver_requirement_is_caught():
    """Control: the lock without openai's jiter."""
    locked = [w for w in read_lock(LOCK_FILE) if canonicalize_name(w.name) != "jiter"]
    assert unmet_requirements(locked, "openai") == {"jiter"}


def import_time_packages(engine_src) -> set[str]:
    """Packages the structured-output backends evaluate when SamplingParams._validate_structured_outputs
    imports them: the LazyLoader packages of each backend module that has no postponed annotations."""
    import re

    source = (engine_src / "vllm/sampling_params.py").read_text()
    body = source[source.index("def _validate_structured_outputs"):]
    body = body[: body.index("\n    def ", 1)]
    modules = re.findall(r"from vllm\.v1\.structured_output\.(backend_\w+) import", body)
    assert "backend_lm_format_enforcer" in modules, modules  # json_mode's HTTP 500 came from here
    packages = set()
    for module in modules:
        text = (engine_src / f"vllm/v1/structured_output/{module}.py").read_text()
        if "from __future__ import annotations" not in text:
            packages |= {m.split(".")[0] for m in re.findall(r'LazyLoader\(\s*"\w+",\s*globals\(\),\s*"([\w.]+)"', text)}
    return packages


def missing_request_time_wheels(locked, engine_src) -> set[str]:
    have = {canonicalize_name(w.name) for w in locked} | {canonicalize_name(n) for n in DEVICE_IMAGE_HAS}
    missing = set()
    for package in import_time_packages(engine_src):
        assert package in REQUEST_TIME_PACKAGES, f"{package}: add it to lock.REQUEST_TIME_PACKAGES"
        distribution, requires = REQUEST_TIME_PACKAGES[package]
        missing |= {canonicalize_name(d) for d in (distribution, *requires)} - have
    return missing


def test_the_lock_holds_what_a_structured_output_request_imports(engine_src):
    """Without lm-format-enforcer json_mode gets HTTP 500 with an empty message on every arm: vLLM wraps
    the ModuleNotFoundError for lmformatenforcer, which every structured-output request imports."""
    assert import_time_packages(engine_src) >= {"lmformatenforcer", "xgrammar"}
    assert missing_request_time_wheels(read_lock(LOCK_FILE), engine_src) == set()


def test_a_lock_without_lm_format_enforcer_is_caught(engine_src):
    """Control: the lock without lm-format-enforcer and interegular."""
    locked = [w for w in read_lock(LOCK_FILE) if canonicalize_name(w.name) not in {"lm-format-enforcer", "interegular"}]
    assert missing_request_time_wheels(locked, engine_src) == {"lm-format-enforcer", "interegular"}


def test_a_malformed_line_is_named(tmp_path):
    lock = tmp_path / "wheels.lock"
    lock.write_text("# comment\npydantic==2.14.4\n")
    with pytest.raises(EngineHarnessError, match="line 2"):
        read_lock(lock)


def test_two_versions_of_one_package_are_refused(tmp_path):
    lock = tmp_path / "wheels.lock"
    lock.write_text(f"pydantic==2.14.4 --hash=sha256:{'a' * 64}\nPydantic==2.13.0 --hash=sha256:{'b' * 64}\n")
    with pytest.raises(EngineHarnessError, match="listed twice"):
        read_lock(lock)


def test_wheels_are_checked_by_sha256(tmp_path):
    good = tmp_path / "a-1.0-py3-none-any.whl"
    good.write_bytes(b"a")
    other = tmp_path / "b-1.0-py3-none-any.whl"
    other.write_bytes(b"b")
    lock = tmp_path / "wheels.lock"
    lock.write_text(f"a==1.0 --hash=sha256:{hashlib.sha256(b'a').hexdigest()}\n"
                    f"b==1.0 --hash=sha256:{hashlib.sha256(b'B').hexdigest()}\n")
    locked = read_lock(lock)
    with pytest.raises(EngineHarnessError, match="b-1.0-py3-none-any.whl has sha256"):
        check_wheels(locked, [good, other])
    with pytest.raises(EngineHarnessError, match="missing locked wheels: b==1.0"):
        check_wheels(locked, [good])
