"""Load the QSA Triton ops of an (optionally patched) vLLM tree without vLLM.

The QSA ops modules import only torch, triton and small vLLM helpers:
``vllm.platforms.current_platform``, ``vllm.triton_utils``, the warmup helper
and (``ops/qsa_indexer.py``) ``vllm.envs`` and ``vllm.utils.math_utils``. This
module installs tiny stand-ins for those and imports the REAL ``ops/qsa.py``
(and ``ops/qsa_prepare.py``, ``ops/qsa_indexer.py``) from the tree, so tests,
benchmarks and the builder's ahead-of-time compile run the shipped code, not a
copy of it. Used by tests/gpu/test_qsa_int8.py, benchmarks/kernels/ and builder.patches.aot.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

OPS_RELPATH = Path("vllm/models/qwen4_exp/nvidia/ops")
OPS_PACKAGE = "vllm.models.qwen4_exp.nvidia.ops"


class _Platform:
    """Stand-in for vllm.platforms.current_platform: just the capability."""

    device_type = "cuda"

    def __init__(self, capability: tuple[int, int] | None) -> None:
        self._capability = capability

    def get_device_capability(self) -> tuple[int, int]:
        if self._capability is not None:
            return self._capability
        import torch

        return torch.cuda.get_device_capability()

    def has_device_capability(self, capability: int) -> bool:
        major, minor = self.get_device_capability()
        return major * 10 + minor >= capability


@dataclasses.dataclass(frozen=True)
class WarmupTensor:
    """Stand-in for vLLM's TritonWarmupTensor: compile-only pointer metadata."""

    dtype: Any
    aligned: bool = True
    shape: tuple[int, ...] = (1,)
    strides: tuple[int, ...] | None = None
    init: Any = 0
    ptr_range_bytes: int = 0

    def data_ptr(self) -> int:
        return 0 if self.aligned else 1

    def ptr_range(self) -> int:
        return self.ptr_range_bytes

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda")

    def stride(self, dim: int | None = None):
        if self.strides is not None:
            result = tuple(self.strides)
        else:
            acc, out = 1, []
            for size in reversed(self.shape):
                out.append(acc)
                acc *= size
            result = tuple(reversed(out))
        return result if dim is None else result[dim]


def _scalar_rep(value: int) -> int:
    """Same Triton specialization class as ``value`` (1, multiple of 16, other)."""
    if value == 1:
        return 1
    if -(1 << 31) <= value < (1 << 31):
        return 16 if value % 16 == 0 else 2
    return (1 << 31) if value % 16 == 0 else (1 << 31) + 1


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def install_standins(engine_root: Path, capability: tuple[int, int] | None) -> None:
    """Put the vLLM helpers the ops modules import, and the ops package path, into sys.modules."""
    import triton
    import triton.language as tl

    ops_dir = Path(engine_root) / OPS_RELPATH
    if not (ops_dir / "qsa.py").is_file():
        raise FileNotFoundError(f"no QSA ops module under {ops_dir}")
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    packages = ["vllm", "vllm.models", "vllm.models.qwen4_exp", "vllm.models.qwen4_exp.nvidia"]
    for name in packages:
        sys.modules[name] = _module(name, __path__=[])
    sys.modules[OPS_PACKAGE] = _module(OPS_PACKAGE, __path__=[str(ops_dir)])
    sys.modules["vllm.platforms"] = _module(
        "vllm.platforms", current_platform=_Platform(capability)
    )
    sys.modules["vllm.triton_utils"] = _module(
        "vllm.triton_utils", HAS_TRITON=True, tl=tl, triton=triton
    )
    for name in ["vllm.model_executor", "vllm.model_executor.warmup"]:
        sys.modules[name] = _module(name, __path__=[])
    sys.modules["vllm.model_executor.warmup.jit_warmup_triton_helper"] = _module(
        "vllm.model_executor.warmup.jit_warmup_triton_helper",
        TritonWarmupTensor=WarmupTensor,
        triton_scalar_specialization_rep=_scalar_rep,
    )
    # ops/qsa_indexer.py (the engine's selection expansion) imports these two as well.
    sys.modules["vllm.envs"] = _module("vllm.envs")
    sys.modules["vllm.utils"] = _module("vllm.utils", __path__=[])
    sys.modules["vllm.utils.math_utils"] = _module(
        "vllm.utils.math_utils", round_up=lambda x, y: -(-x // y) * y
    )


def load_qsa_ops(
    engine_root: Path, *, capability: tuple[int, int] | None = None
) -> types.ModuleType:
    """The tree's ``ops/qsa.py`` imported as ``vllm.models...ops.qsa``."""
    install_standins(engine_root, capability)
    return importlib.import_module(f"{OPS_PACKAGE}.qsa")


def load_file_as(path: Path, name: str) -> types.ModuleType:
    """Import one file under a private name (e.g. upstream's qsa.py beside ours)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_ops_module(name: str) -> types.ModuleType:
    """Another module of the loaded ops package (e.g. ``qsa_kv_layout``)."""
    return importlib.import_module(f"{OPS_PACKAGE}.{name}")
