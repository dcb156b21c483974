"""Shared fixtures: the repo's own target files, loaded raw so tests can break one field at a time."""

from __future__ import annotations

import copy
import tomllib

import pytest

from builder.constants import TARGETS_DIR


@pytest.fixture
def target_data():
    """Return a fresh, mutable dict of a shipped target file."""

    def load(name: str = "gb10") -> dict:
        return copy.deepcopy(tomllib.loads((TARGETS_DIR / f"{name}.toml").read_text()))

    return load
