"""What the engine needs at run time on a GPU beyond its Python tree, checked on CPU by presence.

Each piece is one the engine-on-H200 runs (evidence/engine-h200/) found it reaches for: a server
without it fails at start-up or at its first request, long after the image was called good.
Presence only: importing a CUDA extension needs a driver, which a CPU self-check does not have.
Standard library only, like the rest of the self-check.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
from collections.abc import Callable
from pathlib import Path

#: GPU architectures whose vLLM attention path loads the FlashAttention-3 extension (Hopper).
FA3_ARCHS = ("sm_90",)


class Missing(AssertionError):
    """A runtime piece the engine needs is not in the image."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def check_c_compiler() -> str:
    """Triton compiles a small C launcher per kernel at first use: no compiler, no kernel."""
    name = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    path = shutil.which(name) if name else None
    if path is None:
        raise Missing("no C compiler (cc, gcc, clang or $CC) on PATH: Triton cannot build its kernel launchers; "
                      "install gcc in the image")
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.is_file():
        raise Missing(f"{header} is missing: Triton's launcher build needs the Python headers; install python3-dev")
    return f"{path} and {header}"


def check_flash_attention(arch: str) -> str:
    """vllm.vllm_flash_attn imports its compiled extensions at engine start-up, whether or not the
    model's own attention uses them (an engine run on an H200 died importing _vllm_fa2_C before a shim)."""
    fa = _package_dir("vllm.vllm_flash_attn")
    wanted = ["_vllm_fa2_C"] + (["_vllm_fa3_C"] if arch in FA3_ARCHS else [])
    found = {w: sorted(fa.glob(f"{w}*.so")) for w in wanted}
    missing = [w for w, files in found.items() if not files]
    if missing:
        raise Missing(f"{', '.join(missing)} not in {fa}: the engine fails at start-up on {arch}; "
                      "install the vllm wheel with its compiled extensions")
    return ", ".join(files[0].name for files in found.values())


def check_cutlass_dsl() -> str:
    """CUDA-graph warm-up (enforce_eager off) runs vLLM's CuTe-DSL kernels: nvidia-cutlass-dsl."""
    return f"cutlass at {_package_dir('cutlass')}"


def check_quack() -> str:
    """The same warm-up compiles vLLM's CuTe-DSL router GEMM, whose fake tensors come from quack
    (quack-kernels): without it every server dies in warm-up (evidence/engine-h200)."""
    return f"quack at {_package_dir('quack')}"


def check_flashinfer() -> str:
    """The launch's default sampler and GDN prefill backend are FlashInfer's."""
    return f"flashinfer at {_package_dir('flashinfer')}"


def runtime_checks(arch: str) -> list[tuple[str, Callable[[], str]]]:
    """(name, check()) in the order they run."""
    return [
        ("C compiler for Triton", check_c_compiler),
        ("FlashAttention extensions", lambda: check_flash_attention(arch)),
        ("CuTe DSL for CUDA graphs", check_cutlass_dsl),
        ("quack for the CuTe-DSL router GEMM", check_quack),
        ("FlashInfer", check_flashinfer),
    ]
