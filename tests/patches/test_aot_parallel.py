"""`builder patches aot` compiles configs in forked workers: the report must be the one a
single process writes, in the same order, and a config that fails in a worker must still
fail the build by name. No GPU: Triton compiles for a named arch."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from builder.errors import KernelFitError  # noqa: E402
from builder.patches import aot  # noqa: E402


def test_workers_write_the_report_one_process_writes(patched_tree):
    lines: list[str] = []
    alone = aot.compile_qsa_kernels(engine_root=patched_tree, arch="sm_90", cache_dtypes=("int8",), jobs=1)
    forked = aot.compile_qsa_kernels(engine_root=patched_tree, arch="sm_90", cache_dtypes=("int8",), jobs=3, progress=lines.append)
    assert forked.model_dump() == alone.model_dump()
    # Configs differ in what a mixed-up index would show: registers and shared memory.
    assert len({(c.registers, c.shared_bytes) for c in alone.configs}) > 1
    assert lines[0] == f"aot: compiling {len(alone.configs)} sm_90 configs, 3 at a time"
    done = sorted(line.split("] ", 1)[1].rsplit(":", 1)[0] for line in lines[1:])
    assert done == sorted(aot._describe((c.cache_dtype, c.num_query_heads, c.num_kv_heads, c.block_n, c.num_warps, c.num_splits)) for c in alone.configs)


def test_a_config_that_fails_in_a_worker_fails_the_build_by_name(patched_tree, monkeypatch, tmp_path):
    compile_ = aot._compile

    def broken(arch, key, source, options):
        if key[3:5] == (128, 4):  # BLOCK_N, warps: a tile sm_90's table picks
            raise KernelFitError(f"{arch}: {aot._describe(key)} does not compile: injected", hint="fix the kernel or the tile table entry")
        return compile_(arch, key, source, options)

    monkeypatch.setattr(aot, "_compile", broken)  # the fork carries the patched module
    out = tmp_path / "aot.json"
    with pytest.raises(KernelFitError, match=r"int8 \d+/\d BLOCK_N=128 warps=4 .* injected") as caught:
        aot.compile_qsa_kernels(engine_root=patched_tree, arch="sm_90", cache_dtypes=("int8",), jobs=2, json_out=out)
    assert caught.value.hint == "fix the kernel or the tile table entry"
    assert str(caught.value).count("fix:") == 1
    assert not out.exists()
