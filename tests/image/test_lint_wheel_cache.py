"""The lint venv's wheels come from the base builds' wheel cache, which it fills: a wheel already
there, or the engine wheel `fetch-engine` keeps, is never downloaded again, and a file the cache
holds with another hash is left as it is for pip to judge, never replaced by a link."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from builder.constants import ENGINE_WHEEL_NAME
from builder.image.lintenv import fill_wheel_cache
from builder.image.lock import read_lock

HEADER = "".join(f"# {k}: {v}\n" for k, v in (("engine", "vllm==0.33.0"), ("platform", "linux/amd64"), ("python", "3.11.2"),
                                              ("os-base", "debian bookworm minbase"), ("resolved-by", "pip 23.0.1")))  # fmt: skip
#: No interpreter there: a fill that tried to download would fail on it.
NO_PIP = Path("/nonexistent/bin/python")


def _lock(tmp_path: Path, wheels: dict[str, bytes]):
    lines = []
    for filename, data in wheels.items():
        name, version = filename.split("-")[:2]
        lines.append(f"{name}=={version} --hash=sha256:{hashlib.sha256(data).hexdigest()}  # {filename}\n")
    path = tmp_path / "lock.txt"
    path.write_text(HEADER + "".join(lines))
    return read_lock(path)


def test_a_cache_holding_every_wheel_downloads_nothing(tmp_path):
    cache = tmp_path / "wheels"
    cache.mkdir()
    wheels = {"a-1.0-py3-none-any.whl": b"a", "b-2.0-py3-none-any.whl": b"b"}
    for name, data in wheels.items():
        (cache / name).write_bytes(data)
    fill_wheel_cache(lock=_lock(tmp_path, wheels), cache=cache, engine_cache=tmp_path / "engine", python=NO_PIP)
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == wheels


def test_the_kept_engine_wheel_is_linked_in_not_downloaded(tmp_path):
    engine_cache = tmp_path / "engine"
    engine_cache.mkdir()
    (engine_cache / ENGINE_WHEEL_NAME).write_bytes(b"the engine wheel")
    cache = tmp_path / "wheels"
    fill_wheel_cache(lock=_lock(tmp_path, {ENGINE_WHEEL_NAME: b"the engine wheel"}), cache=cache, engine_cache=engine_cache, python=NO_PIP)
    assert (cache / ENGINE_WHEEL_NAME).samefile(engine_cache / ENGINE_WHEEL_NAME)
    assert [p.name for p in cache.iterdir()] == [ENGINE_WHEEL_NAME]  # no temporary file left beside it


def test_a_kept_engine_wheel_of_another_hash_is_not_taken(tmp_path):
    engine_cache = tmp_path / "engine"
    engine_cache.mkdir()
    (engine_cache / ENGINE_WHEEL_NAME).write_bytes(b"another build")
    cache = tmp_path / "wheels"
    with pytest.raises(FileNotFoundError):  # it goes to pip instead
        fill_wheel_cache(lock=_lock(tmp_path, {ENGINE_WHEEL_NAME: b"the engine wheel"}), cache=cache,
                         engine_cache=engine_cache, python=NO_PIP)  # fmt: skip
    assert not (cache / ENGINE_WHEEL_NAME).exists()


def test_a_cached_file_of_another_hash_is_not_replaced_by_the_link(tmp_path):
    engine_cache = tmp_path / "engine"
    engine_cache.mkdir()
    (engine_cache / ENGINE_WHEEL_NAME).write_bytes(b"the engine wheel")
    cache = tmp_path / "wheels"
    cache.mkdir()
    (cache / ENGINE_WHEEL_NAME).write_bytes(b"someone else's file")
    with pytest.raises(FileNotFoundError):
        fill_wheel_cache(lock=_lock(tmp_path, {ENGINE_WHEEL_NAME: b"the engine wheel"}), cache=cache,
                         engine_cache=engine_cache, python=NO_PIP)  # fmt: skip
    assert (cache / ENGINE_WHEEL_NAME).read_bytes() == b"someone else's file"
