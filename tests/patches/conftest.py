"""Fixtures for the patches step (the engine and its patched copy live in tests/conftest.py)."""

from __future__ import annotations

import sys

import pytest

from builder.constants import PATCHES_DIR


@pytest.fixture(scope="session")
def bundle_helpers():
    """bundle/patches on sys.path: the torch references shared with the GPU tests."""
    sys.path.insert(0, str(PATCHES_DIR))
    yield
    sys.path.remove(str(PATCHES_DIR))
