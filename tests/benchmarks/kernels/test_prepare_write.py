"""benchmarks.kernels.prepare_write: its inputs drive the real qsa_prepare (Triton's
interpreter, on the CPU), its `none` arm writes no main cache row, and its byte check
catches a wrong int8 row or scale."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from benchmarks.kernels import prepare_write as bench
from builder.constants import REPO_ROOT

# Run in a child: TRITON_INTERPRET must be set before triton is imported. The interpreter
# has no libdevice _rn intrinsics, so only the bf16, fp8 and none arms run here; the int8
# arm runs on the GPU, where the bench checks its bytes against the bf16 arm's rows.
_ARMS_ON_CPU = r"""
import json, sys, torch
from pathlib import Path
from benchmarks.kernels import prepare_write as b
from builder.patches.ops_loader import load_ops_module, load_qsa_ops
load_qsa_ops(Path(sys.argv[1]))
prepare, layout = load_ops_module("qsa_prepare"), load_ops_module("qsa_kv_layout")
gen = torch.Generator().manual_seed(0)
out = []
for label, tokens, run, heads in (("decode 2x5", 10, 5, 2), ("prefill 64", 64, 64, 1)):
    caches = b.main_caches(layout, heads, pages=4, dev="cpu")
    launch = b.Launch(prepare, b.requests_of(label, tokens, run), heads, gen, dev="cpu")
    slots = torch.randperm(4 * b.PAGE, generator=gen)[:tokens]
    launch(caches["bf16"], torch.full_like(slots, -1))
    none_wrote = int(caches["bf16"].ne(0).sum())
    ring_written = bool(launch.state_cache.ne(0).any())
    launch(caches["bf16"], slots)
    launch(caches["fp8"], slots)
    rows = caches["bf16"].reshape(-1, heads, 2 * b.HEAD_DIM)
    written = rows.ne(0).any(-1).any(-1).nonzero().flatten().sort().values
    fp8_rows = caches["fp8"].view(torch.uint8).reshape(-1, heads, 2 * b.HEAD_DIM).ne(0).any(-1).any(-1)
    out.append({"label": label, "none_wrote": none_wrote, "ring_written": ring_written,
                "bf16_rows_at_slots": written.tolist() == slots.sort().values.tolist(),
                "fp8_rows_at_slots": fp8_rows.nonzero().flatten().tolist() == slots.sort().values.tolist(),
                "works": launch.work.tolist()})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cpu_arms(patched_tree):
    # The child imports the bench as the GPU host runs it: from the repo root, the series' helpers on PYTHONPATH.
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO_ROOT / "bundle" / "patches")}
    done = subprocess.run(
        [sys.executable, "-c", _ARMS_ON_CPU, str(patched_tree)],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["label"]: r for r in json.loads(done.stdout.splitlines()[-1])}


def test_none_arm_writes_no_main_row_but_does_the_rest(cpu_arms):
    for r in cpu_arms.values():
        assert r["none_wrote"] == 0
        assert r["ring_written"]


def test_bf16_and_fp8_arms_write_exactly_the_slots(cpu_arms):
    for r in cpu_arms.values():
        assert r["bf16_rows_at_slots"] and r["fp8_rows_at_slots"]


def test_work_items_cover_each_requests_completed_groups(cpu_arms):
    # Decode at 32K: positions 32763-32767 complete groups ending at 32763 and 32767.
    assert cpu_arms["decode 2x5"]["works"] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert cpu_arms["prefill 64"]["works"] == [[0, w] for w in range(16)]


def test_requests_follow_the_store_bench_sizes():
    assert bench.requests_of("decode 64x5", 320, 5) == [(bench.DECODE_CONTEXT - 5, 5)] * 64
    assert bench.requests_of("prefill 2048", 2048, 64) == [(0, 2048)]


def _int8_written(layout, heads: int, slots: torch.Tensor, gen: torch.Generator) -> dict:
    """CPU caches as the GPU leaves them: bf16 rows at the slots, and their quantized int8 rows."""
    from qsa_reference import quantize_int8_per_row

    caches = bench.main_caches(layout, heads, pages=4, dev="cpu")
    blk, off = slots // bench.PAGE, slots % bench.PAGE
    rows = torch.randn(len(slots), heads, 2 * bench.HEAD_DIM, generator=gen).to(torch.bfloat16)
    caches["bf16"][blk, off] = rows
    _, key, value, ks, vs = caches["int8"]
    key[blk, off], ks[blk, off] = quantize_int8_per_row(rows[..., : bench.HEAD_DIM])
    value[blk, off], vs[blk, off] = quantize_int8_per_row(rows[..., bench.HEAD_DIM :])
    return caches


@pytest.mark.parametrize("heads", [1, 2])
def test_int8_check_passes_the_right_bytes_and_catches_one_wrong(patched_tree, heads):
    from builder.patches.ops_loader import load_ops_module, load_qsa_ops

    load_qsa_ops(patched_tree)
    layout = load_ops_module("qsa_kv_layout")
    gen = torch.Generator().manual_seed(heads)
    slots = torch.randperm(4 * bench.PAGE, generator=gen)[:20]
    caches = _int8_written(layout, heads, slots, gen)
    assert bench.int8_matches_bf16(caches, slots)
    _, key, value, ks, vs = caches["int8"]
    blk, off = int(slots[7]) // bench.PAGE, int(slots[7]) % bench.PAGE
    for tensor, index in ((key, (blk, off, heads - 1, 3)), (vs, (blk, off, 0))):
        saved = tensor[index].clone()
        tensor[index] = saved + 1
        assert not bench.int8_matches_bf16(caches, slots)
        tensor[index] = saved
    assert bench.int8_matches_bf16(caches, slots)

