"""Fixtures for the patches step: the real pinned engine (cached), and its patched copy."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from builder.constants import ENGINE_QSA_DIR as QSA_DIR
from builder.constants import PATCHES_DIR


@pytest.fixture(scope="session")
def engine_src() -> Path:
    """The verified vllm==0.33.0 sources (downloads ~336 MB once, then cached)."""
    from builder.patches.engine import fetch_engine

    return fetch_engine().src_dir


def copy_series_sources(engine_src: Path, dest: Path) -> None:
    """The QSA folder and every other upstream file the series patches, copied into ``dest``."""
    from builder.patches.series import load_series

    shutil.copytree(engine_src / QSA_DIR, dest / QSA_DIR)
    for patch in load_series(PATCHES_DIR):
        for entry in patch.files:
            source = engine_src / entry.path
            if source.is_file() and not (dest / entry.path).exists():
                (dest / entry.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / entry.path)


@pytest.fixture(scope="session")
def patched_tree(engine_src: Path, tmp_path_factory) -> Path:
    """A copy of the real sources the series touches, with the series applied through apply_series."""
    from builder.patches.apply import apply_series

    root = tmp_path_factory.mktemp("patched")
    copy_series_sources(engine_src, root)
    apply_series(target=root, patches_dir=PATCHES_DIR)
    return root


@pytest.fixture(scope="session")
def bundle_helpers():
    """bundle/patches on sys.path: the torch references shared with the GPU tests."""
    sys.path.insert(0, str(PATCHES_DIR))
    yield
    sys.path.remove(str(PATCHES_DIR))
