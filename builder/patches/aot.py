"""Ahead-of-time compile the patched QSA split-K kernel for a target arch, no GPU needed.

For every tile config the patched dispatch can pick in production (both GQA
shapes, decode and prefill, bf16 / fp8 / int8), compile the split-K kernel
(``_qsa_sparse_paged_gqa_splitk_kernel``; ``_qsa_sparse_paged_int8_splitk_kernel``
for int8) with ``triton.compile`` for the arch and
read its shared memory (Triton metadata) and registers / local memory
(``cuobjdump --dump-resource-usage`` on the cubin). A config whose shared
memory exceeds the arch's per-block maximum raises KernelFitError: it would
compile on Hopper and then fail to launch on, say, GB10.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

from builder.constants import ARCH_MAX_SHARED_BYTES
from builder.errors import KernelFitError
from builder.patches.ops_loader import load_qsa_ops

HEAD_DIM = 256
SELECTION_WIDTH = 2051  # indexer budget 2048, compress ratio 4
GQA_SHAPES = ((24, 2), (12, 1))  # (query heads, kv heads) at TP1 and TP2
_RESOURCE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


class KernelConfig(BaseModel):
    cache_dtype: str
    num_query_heads: int
    num_kv_heads: int
    block_n: int
    num_warps: int
    num_splits: int
    shared_bytes: int
    registers: int
    local_bytes: int  # per-thread local memory (spills and stack)
    fits: bool


class AotReport(BaseModel):
    arch: str
    triton_version: str
    max_shared_bytes: int
    configs: list[KernelConfig]


def _capability(arch: str) -> tuple[int, int]:
    if arch not in ARCH_MAX_SHARED_BYTES:
        raise KernelFitError(f"unknown arch {arch!r}", hint=f"use one of {sorted(ARCH_MAX_SHARED_BYTES)}")
    digits = arch.removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


def _cache_type(dtype: str, capability: tuple[int, int]) -> str:
    if dtype == "bf16":
        return "*bf16"
    if dtype == "int8":
        return "*i8"
    # fp8: an e4m3 view on sm_89+, the raw bytes below (as the impl hands it over).
    return "*fp8e4nv" if capability >= (8, 9) else "*u8"


def _runtime_ints(*, dtype: str, num_q_heads: int, num_kv_heads: int, page: int) -> dict[str, int]:
    """Integer arguments as the impl passes them in production (TP1/TP2, 32K-token
    requests), so the AOT build gets the same 1 / multiple-of-16 specializations
    (and so the same vectorization, pipelining and shared memory) as the JIT."""
    row = 2 * HEAD_DIM  # K|V slot in cache elements
    page_elems = num_kv_heads * page * row
    if dtype == "int8":
        page_elems += 2 * page * num_kv_heads * 4  # the scale tail, in bytes == elements
    ints = {
        "stride_q_row": num_q_heads * HEAD_DIM, "stride_q_head": HEAD_DIM,
        "stride_k_block": page_elems, "stride_k_token": row, "stride_k_head": page * row,
        "stride_v_block": page_elems, "stride_v_token": row, "stride_v_head": page * row,
        "stride_indices_row": SELECTION_WIDTH + 1, "stride_table_req": 32768 // page,
        "stride_output_row": num_q_heads * HEAD_DIM, "stride_output_head": HEAD_DIM,
        "stride_output_gate_row": num_q_heads * HEAD_DIM, "stride_output_gate_head": HEAD_DIM,
        "num_rows": 2, "num_cache_blocks": 4096, "num_requests": 2,  # first and last: do_not_specialize
    }  # fmt: skip
    if dtype == "int8":  # only the int8 kernel takes the side-scale strides
        ints |= {"stride_scale_block": page_elems // 4, "stride_scale_token": num_kv_heads, "stride_scale_head": 1}
    return ints


def _source(kernel, *, cache: str, splits: int, constexprs: dict, ints: dict[str, int]):
    """ASTSource with the JIT's specialization: ints equal to 1 become constants,
    pointers and multiples of 16 get tt.divisibility 16."""
    from triton.compiler import ASTSource

    partial = "*fp32" if splits > 1 else "*bf16"
    pointers = {
        "q_ptr": "*bf16", "k_cache_ptr": cache, "v_cache_ptr": cache,
        "indices_ptr": "*i32", "block_table_ptr": "*i32", "token_to_req_ptr": "*i32",
        "partial_output_ptr": partial, "partial_lse_ptr": partial, "output_ptr": "*bf16",
        "output_gate_ptr": "*bf16", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32",
    }  # fmt: skip
    floats = {"softmax_scale", "output_scale"}
    unspecialized = {"num_rows", "num_requests"}
    signature, constants, attrs = {}, dict(constexprs), {}
    for index, (name, param) in enumerate(zip(kernel.arg_names, kernel.params)):
        if param.is_constexpr:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = pointers[name]
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif name in floats:
            signature[name] = "fp32"
        elif ints[name] == 1 and name not in unspecialized:
            signature[name] = "constexpr"
            constants[name] = 1
        else:
            signature[name] = "i32"
            if ints[name] % 16 == 0 and name not in unspecialized:
                attrs[(index,)] = [["tt.divisibility", 16]]
    return ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=attrs)


def _resources(cubin: bytes, cuobjdump: Path) -> tuple[int, int]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", handle.name], capture_output=True, text=True, check=True).stdout
    match = _RESOURCE.search(out)
    if match is None:
        raise KernelFitError("cuobjdump printed no resource usage", hint="check the Triton wheel's cuobjdump")
    return int(match[1]), int(match[2]) + int(match[4])


CACHE_DTYPES = ("bf16", "fp8", "int8")


def production_configs(ops: ModuleType, cache_dtypes=CACHE_DTYPES) -> set[tuple[str, int, int, int, int, int, int]]:
    """(dtype, q_heads, kv_heads, block_n, warps, tiles, splits) the dispatch can pick."""
    configs = set()
    for dtype in cache_dtypes:
        for num_q_heads, num_kv_heads in GQA_SHAPES:
            for rows in range(1, 8193):
                for prefill in (False, True):
                    block_n, warps, tiles, splits = ops._select_config(
                        rows, num_kv_heads, prefill, SELECTION_WIDTH, dtype == "fp8", dtype == "int8"
                    )
                    configs.add((dtype, num_q_heads, num_kv_heads, block_n, warps, tiles, splits))
    return configs


def _config_sources(ops: ModuleType, *, arch: str, page_size: int, cache_dtypes: tuple[str, ...]) -> list[tuple[tuple, object, dict]]:
    """((dtype, q_heads, kv_heads, block_n, warps, splits), ASTSource, options) for every
    production config of ``ops``, in sorted order, specialized as the JIT would."""
    import triton

    capability = _capability(arch)
    sources = []
    for dtype, num_q_heads, num_kv_heads, block_n, warps, tiles, splits in sorted(production_configs(ops, cache_dtypes)):
        group = num_q_heads // num_kv_heads
        constexprs = {
            "TOPK": SELECTION_WIDTH, "PAGE_SIZE": page_size, "PAGE_TABLE_WIDTH": 32768 // page_size,
            "GROUP_SIZE": group, "HEAD_DIM": HEAD_DIM, "NUM_QUERY_HEADS": num_q_heads,
            "NUM_SPLITS": splits, "NUM_TILES": tiles, "BLOCK_M": triton.next_power_of_2(group),
            "BLOCK_N": block_n,
        }  # fmt: skip
        ints = _runtime_ints(dtype=dtype, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, page=page_size)
        kernel = ops._qsa_sparse_paged_int8_splitk_kernel if dtype == "int8" else ops._qsa_sparse_paged_gqa_splitk_kernel
        if "PAIRED_SCALES" in kernel.arg_names:  # the engine's scale tail is always paired
            constexprs["PAIRED_SCALES"] = True
        source = _source(kernel, cache=_cache_type(dtype, capability), splits=splits, constexprs=constexprs, ints=ints)
        key = (dtype, num_q_heads, num_kv_heads, block_n, warps, splits)
        sources.append((key, source, {"num_warps": warps, "num_stages": 2}))
    return sources


def _compile(arch: str, key: tuple, source, options: dict):
    import triton
    from triton.backends.compiler import GPUTarget

    major, minor = _capability(arch)
    try:
        return triton.compile(source, target=GPUTarget("cuda", major * 10 + minor, 32), options=options)
    except Exception as exc:  # the compiler raises many types; any is a failed config
        raise KernelFitError(
            f"{arch}: {_describe(key)} does not compile: {exc}",
            hint="fix the kernel or the tile table entry",
        ) from exc


def compiled_configs(ops: ModuleType, *, arch: str, page_size: int = 64, cache_dtypes: tuple[str, ...] = CACHE_DTYPES):
    """Yield ((dtype, q_heads, kv_heads, block_n, warps, splits), compiled kernel) for every
    production config of ``ops`` (a tree loaded for ``arch``), compiled as the JIT would."""
    for key, source, options in _config_sources(ops, arch=arch, page_size=page_size, cache_dtypes=cache_dtypes):
        yield key, _compile(arch, key, source, options)


# Set in the parent before the pool forks, so workers index it instead of unpickling
# Triton's ASTSource (which holds the JIT function). Only _fit_worker reads it.
_FORK_SOURCES: list[tuple[tuple, object, dict]] = []


def _measure(arch: str, index: int, cuobjdump: Path) -> tuple[int, int, int, float]:
    """(shared bytes, registers, local bytes, seconds) of one config: the work of one worker."""
    started = time.monotonic()
    key, source, options = _FORK_SOURCES[index]
    compiled = _compile(arch, key, source, options)
    registers, local = _resources(compiled.asm["cubin"], cuobjdump)
    return int(compiled.metadata.shared), registers, local, time.monotonic() - started


def _fit_worker(arch: str, index: int, cuobjdump: Path) -> tuple[int, int, int, float] | str:
    try:
        return _measure(arch, index, cuobjdump)
    except KernelFitError as exc:  # the parent re-raises it with the same hint
        return exc.message


def _describe(key: tuple) -> str:
    dtype, num_q_heads, num_kv_heads, block_n, warps, splits = key
    return f"{dtype} {num_q_heads}/{num_kv_heads} BLOCK_N={block_n} warps={warps} splits={splits}"


def default_jobs() -> int:
    """One compile per CPU this process may run on: Triton holds the GIL while it compiles."""
    return max(1, len(os.sched_getaffinity(0)))


def compile_qsa_kernels(
    *,
    engine_root: Path,
    arch: str,
    page_size: int = 64,
    strict: bool = True,
    json_out: Path | None = None,
    cache_dtypes: tuple[str, ...] = CACHE_DTYPES,
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> AotReport:
    """Compile every production config of the patched split-K kernel for ``arch``.

    ``jobs`` configs compile at once in forked workers (default: one per usable CPU;
    under QEMU emulation a config takes 17-42 s). ``progress`` gets a line per
    compiled config. ``json_out`` receives the report (written to a temp file, then
    renamed) even when a config does not fit, so the failure can be inspected.
    """
    import triton

    ops = load_qsa_ops(Path(engine_root), capability=_capability(arch))
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    limit = ARCH_MAX_SHARED_BYTES[arch]
    sources = _config_sources(ops, arch=arch, page_size=page_size, cache_dtypes=cache_dtypes)
    jobs = max(1, min(jobs or default_jobs(), len(sources)))
    say = progress or (lambda _line: None)
    say(f"aot: compiling {len(sources)} {arch} configs, {jobs} at a time")
    measured: dict[int, tuple[int, int, int, float]] = {}

    def record(index: int, outcome: tuple[int, int, int, float] | str) -> None:
        if isinstance(outcome, str):
            raise KernelFitError(outcome, hint="fix the kernel or the tile table entry")
        measured[index] = outcome
        say(f"aot: [{len(measured)}/{len(sources)}] {_describe(sources[index][0])}: {outcome[3]:.1f} s")

    _FORK_SOURCES[:] = sources
    try:
        if jobs == 1:
            for index in range(len(sources)):
                record(index, _measure(arch, index, cuobjdump))
        else:
            # fork: workers inherit the loaded ops and sources. No GPU is touched here, so no
            # CUDA context is forked; the CLI and the image step are single-threaded when they fork.
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"))
            try:
                futures = {pool.submit(_fit_worker, arch, index, cuobjdump): index for index in range(len(sources))}
                for future in as_completed(futures):
                    record(futures[future], future.result())
            finally:  # a failed config stops the rest at once rather than after every queued compile
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        _FORK_SOURCES.clear()
    results = []
    for index, (key, _, _) in enumerate(sources):
        dtype, num_q_heads, num_kv_heads, block_n, warps, splits = key
        shared, registers, local, _ = measured[index]
        results.append(
            KernelConfig(
                cache_dtype=dtype, num_query_heads=num_q_heads, num_kv_heads=num_kv_heads, block_n=block_n, num_warps=warps, num_splits=splits,
                shared_bytes=shared, registers=registers, local_bytes=local, fits=shared <= limit,
            )  # fmt: skip
        )
    report = AotReport(arch=arch, triton_version=triton.__version__, max_shared_bytes=limit, configs=results)
    if json_out is not None:
        tmp = json_out.with_suffix(json_out.suffix + ".tmp")
        tmp.write_text(report.model_dump_json(indent=2) + "\n")
        tmp.replace(json_out)
    too_big = [c for c in results if not c.fits]
    if strict and too_big:
        worst = max(too_big, key=lambda c: c.shared_bytes)
        raise KernelFitError(
            f"{arch}: {len(too_big)} production QSA configs exceed {limit} B of shared memory "
            f"(worst: {worst.cache_dtype} BLOCK_N={worst.block_n} warps={worst.num_warps} needs {worst.shared_bytes} B)",
            hint=f"give {arch} smaller BLOCK_N entries in the patched tile table",
        )
    return report
