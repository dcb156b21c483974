"""The CPU AOT tests compile with the Triton the images run. Under the engine lock's Triton 3.8.0
the int8 kernel spilled 240-360 B per thread and moved V through shared memory, while these tests,
on a 3.6.0 pin, saw none of it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pins(text: str) -> set[str]:
    return set(re.findall(r"^\s*\"?triton==([0-9][^\s\",]*)", text, flags=re.MULTILINE))


def test_the_test_venv_pins_the_engine_locks_triton():
    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    venv = {spec.split("==", 1)[1] for spec in test_extra if spec.startswith("triton==")}
    locks = sorted((ROOT / "docker" / "locks").glob("vllm-*-linux-*.txt"))
    assert len(locks) >= 2
    for lock in locks:
        assert _pins(lock.read_text()) == venv, f"{lock.name} pins Triton {_pins(lock.read_text())}, pyproject's test extra {venv}"


def test_the_pin_reader_sees_a_drifted_pin():
    assert _pins("torch==2.14.0 --hash=sha256:aa\ntriton==3.8.0 --hash=sha256:bb  # triton-3.8.0.whl\n") == {"3.8.0"}
    assert _pins("tokenspeed-triton==3.9.10 --hash=sha256:cc\n") == set()
    assert _pins('  "triton==3.6.0",\n') == {"3.6.0"}
