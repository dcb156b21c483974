"""Load the memory-mapped PLE module of a patched vLLM tree, and upstream's pinned lookup kernel,
without the rest of vLLM (the GPU test machine has torch and triton but no vLLM).

``common/ple_mmap.py`` imports only torch, numpy, triton and two vLLM helpers:
``vllm.logger.init_logger`` and ``vllm.triton_utils``. This module installs stand-ins for those
two (the standard logger, the real triton) and imports the REAL file from the tree. Upstream's
``_lookup_ple_embedding_from_pinned_kernel`` lives in ``common/ngram_embedding.py``, which
imports half of vLLM, so its source is cut out of that file unchanged and imported from a
temporary module. Used by tests/gpu/test_ple_mmap.py and benchmarks/ple/gpu_bench.py.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import sys
import tempfile
import types
from pathlib import Path

COMMON_RELPATH = Path("vllm/models/qwen4_exp/common")
COMMON_PACKAGE = "vllm.models.qwen4_exp.common"
PINNED_KERNEL = "_lookup_ple_embedding_from_pinned_kernel"


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def load_ple_mmap(engine_root: Path) -> types.ModuleType:
    """The tree's ``common/ple_mmap.py`` imported as ``vllm.models.qwen4_exp.common.ple_mmap``."""
    import triton
    import triton.language as tl

    common = Path(engine_root) / COMMON_RELPATH
    if not (common / "ple_mmap.py").is_file():
        raise FileNotFoundError(f"no ple_mmap.py under {common}: apply the ple-mmap patch first")
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    for name in ("vllm", "vllm.models", "vllm.models.qwen4_exp"):
        sys.modules[name] = _module(name, __path__=[])
    sys.modules[COMMON_PACKAGE] = _module(COMMON_PACKAGE, __path__=[str(common)])
    sys.modules["vllm.logger"] = _module("vllm.logger", init_logger=logging.getLogger)
    sys.modules["vllm.triton_utils"] = _module("vllm.triton_utils", HAS_TRITON=True, tl=tl, triton=triton)
    return importlib.import_module(f"{COMMON_PACKAGE}.ple_mmap")


def load_upstream_pinned_kernel(engine_root: Path):
    """Upstream's pinned-UVA lookup kernel, its source cut unchanged from ngram_embedding.py."""
    path = Path(engine_root) / COMMON_RELPATH / "ngram_embedding.py"
    source = path.read_text()
    node = next(
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == PINNED_KERNEL
    )
    start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
    body = "\n".join(source.splitlines()[start : node.end_lineno])
    # triton.jit reads the function's source file, so it must live in a real file.
    folder = Path(tempfile.mkdtemp(prefix="ple-upstream-"))
    module_path = folder / "upstream_pinned_lookup.py"
    module_path.write_text(f"# cut from {path}\nimport triton\nimport triton.language as tl\n\n\n{body}\n")
    spec = importlib.util.spec_from_file_location("upstream_pinned_lookup", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["upstream_pinned_lookup"] = module
    spec.loader.exec_module(module)
    return getattr(module, PINNED_KERNEL)
