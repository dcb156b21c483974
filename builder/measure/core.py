"""Loads bundle/benchmark_vllm.py, the one source of the streaming client and metric math.

The bundle ships that file standalone (httpx only), so the builder imports it by path rather
than keeping a second copy of the metric code.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from builder.constants import BENCHMARK_SCRIPT
from builder.errors import MeasureError

_MODULE_NAME = "qfn_benchmark_vllm"


def _load() -> ModuleType:
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, BENCHMARK_SCRIPT)
    if spec is None or spec.loader is None or not BENCHMARK_SCRIPT.is_file():
        raise MeasureError(
            f"benchmark script not found at {BENCHMARK_SCRIPT}",
            hint="run from a checkout of the repository, or set QFN_REPO_ROOT to one",
        )
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so dataclasses can resolve the module by name.
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


bench = _load()
