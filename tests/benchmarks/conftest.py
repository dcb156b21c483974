"""Shared by the benchmark-script tests: the scripts live outside any package, so they load by path."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from builder.constants import REPO_ROOT


def load_script(relpath: str, name: str) -> ModuleType:
    """The benchmark script at REPO_ROOT/relpath, imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
