"""Where a small quantize-on-write's time goes: the shipped write against kernels that do less.

At the engine's write sizes (qsa_store_bench.SIZES, paged slots, 2 and 1 kv heads), CUDA graph of
qsa_store_bench.GRAPH_LAUNCHES launches replayed, per launch, arms interleaved per rep:
  copy:    dst.copy_(src) of the same bytes (a memcpy node): qsa_store_bench's 80% yardstick
  kcopy:   a Triton kernel copying the same bytes (a kernel node, as the write is)
  empty:   a Triton kernel with the write's grid, warps and arguments that returns at once
  gather:  the write's loads, slot addressing and stores, without the absmax, divides and rounding
  absmax:  gather plus each row's absmax (stored as its scale)
  divide:  absmax plus two div_rn divides (scale, then 1 / scale; values times it, truncated): the
           write's divisions as vLLM spells them, and as the write did them before session 29
  shipped: qsa_store_int8_kv of --engine (plus round-half-away and the clamp)
  fastdiv: this file's kernel with absmax / 127 as a product and its FMA correction and 1 / scale
           as rcp_rn, byte-compared with shipped (the same bytes as div_rn: int8_unit_test's
           exhaustive row-scale test, store_divide.py). Against a tree before session 29 it is the
           candidate; since then the write ships this math, and the two arms' difference is the
           run's noise floor
Each arm adds one step of the write's chain to the one before: the differences say what each
costs; empty is the launch alone; kcopy against copy says what a kernel node costs over a
memcpy node. Only shipped and fastdiv write correct bytes: the others are timing probes.

    python benchmarks/int8_variants/store_floor.py --engine PATCHED --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "bundle" / "patches")]

from qsa_cases import int8_kv_cache  # noqa: E402
from qsa_grid import versions, write_json  # noqa: E402
from qsa_loader import load_ops_module, load_qsa_ops  # noqa: E402
from qsa_store_bench import PAGE, POOL_PAGES, SIZES, size_inputs, slots_for, time_pair  # noqa: E402
from store_divide import INV_127 as _INV_127_F32  # noqa: E402

ARMS = ("copy", "kcopy", "empty", "gather", "absmax", "divide", "shipped", "fastdiv")
STAGES = {"gather": 0, "absmax": 1, "divide": 2, "fastdiv": 3}
INV_127 = tl.constexpr(float(_INV_127_F32))  # fp32(1 / 127), the constant store_divide.py proves
COPY_WORDS = 1024  # int32 words per program of kcopy: 4 KB, 8 words per thread at 4 warps


@triton.jit
def _copy_words_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _empty_store_kernel(key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, k_scale_ptr, v_scale_ptr, slots_ptr,
                        s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, num_tokens, num_slots,
                        PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_HEADS: tl.constexpr,
                        BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr):
    if num_tokens < 0:  # never: keeps the kernel from being empty to the compiler
        tl.store(slots_ptr, 0)


@triton.jit
def _round_clamp(q):
    """The shipped _quantize_int8's rounding: half away from zero, clamped to [-128, 127]."""
    return tl.minimum(tl.maximum(libdevice.round(q), -128.0), 127.0).to(tl.int8)


@triton.jit
def _div127_rn(a):
    """a / 127 correctly rounded, as a product and two FMA corrections (store_divide.py)."""
    q = libdevice.mul_rn(a, INV_127)
    return libdevice.fma_rn(libdevice.fma_rn(-q, 127.0, a), INV_127, q)


@triton.jit
def _gather_store_kernel(key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, k_scale_ptr, v_scale_ptr, slots_ptr,
                         stride_key_token, stride_key_head, stride_value_token, stride_value_head,
                         stride_cache_block, stride_cache_token, stride_cache_head,
                         stride_scale_block, stride_scale_token, stride_scale_head, num_tokens, num_slots,
                         PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_HEADS: tl.constexpr,
                         BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, STAGE: tl.constexpr):
    """_qsa_store_int8_kv_kernel's loads, addressing and stores; STAGE adds its math a step at a time
    (0: none, values truncated; 1: the absmax; 2: and the two divides; timing only) or, with 3,
    writes the shipped bytes with the cheaper division (fastdiv)."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    in_range = tokens < num_tokens
    rows = tokens.to(tl.int64)
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, HEAD_DIM)
    row_mask = in_range[:, None] & (heads[None, :] < NUM_HEADS)
    slot = tl.load(slots_ptr + rows, mask=in_range, other=-1).to(tl.int64)
    k = tl.load(key_ptr + (rows * stride_key_token)[:, None, None] + (heads * stride_key_head)[None, :, None]
                + dims[None, None, :], mask=row_mask[:, :, None], other=0.0)
    v = tl.load(value_ptr + (rows * stride_value_token)[:, None, None] + (heads * stride_value_head)[None, :, None]
                + dims[None, None, :], mask=row_mask[:, :, None], other=0.0)
    valid = in_range & (slot >= 0) & (slot < num_slots)
    store_mask = valid[:, None] & (heads[None, :] < NUM_HEADS)
    block = slot // PAGE_SIZE
    offset = slot % PAGE_SIZE
    cache_rows = ((block * stride_cache_block + offset * stride_cache_token)[:, None, None]
                  + (heads * stride_cache_head)[None, :, None] + dims[None, None, :])
    scale_slots = (block * stride_scale_block + offset * stride_scale_token)[:, None] + (heads * stride_scale_head)[None, :]
    if STAGE == 0:
        k_scale = tl.full((BLOCK_T, BLOCK_H), 1.0, tl.float32)
        v_scale = k_scale
        k_out = k.to(tl.int8)
        v_out = v.to(tl.int8)
    else:
        k_scale = tl.max(tl.abs(k.to(tl.float32)), axis=2)
        v_scale = tl.max(tl.abs(v.to(tl.float32)), axis=2)
        if STAGE == 1:
            k_out = k.to(tl.int8)
            v_out = v.to(tl.int8)
        elif STAGE == 3:
            k_scale = tl.maximum(_div127_rn(k_scale), 1e-6)
            v_scale = tl.maximum(_div127_rn(v_scale), 1e-6)
            k_out = _round_clamp(libdevice.mul_rn(k.to(tl.float32), libdevice.rcp_rn(k_scale)[:, :, None]))
            v_out = _round_clamp(libdevice.mul_rn(v.to(tl.float32), libdevice.rcp_rn(v_scale)[:, :, None]))
        else:
            k_scale = tl.maximum(libdevice.div_rn(k_scale, 127.0), 1e-6)
            v_scale = tl.maximum(libdevice.div_rn(v_scale, 127.0), 1e-6)
            k_out = (k.to(tl.float32) * libdevice.div_rn(1.0, k_scale)[:, :, None]).to(tl.int8)
            v_out = (v.to(tl.float32) * libdevice.div_rn(1.0, v_scale)[:, :, None]).to(tl.int8)
    tl.store(key_cache_ptr + cache_rows, k_out, mask=store_mask[:, :, None])
    tl.store(value_cache_ptr + cache_rows, v_out, mask=store_mask[:, :, None])
    tl.store(k_scale_ptr + scale_slots, k_scale, mask=store_mask)
    tl.store(v_scale_ptr + scale_slots, v_scale, mask=store_mask)


def store_launch(ops, kernel, key, value, key_cache, value_cache, ks, vs, slots, **stage):
    """Launch kernel exactly as qsa_store_int8_kv launches its own: grid, warps, arguments."""
    block_t, num_warps = ops._store_int8_launch(key.shape[0], key.shape[1])
    kernel[(triton.cdiv(key.shape[0], block_t),)](
        key, value, key_cache, value_cache, ks, vs, slots,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2), *ks.stride(),
        key.shape[0], key_cache.shape[0] * key_cache.shape[1],
        PAGE_SIZE=key_cache.shape[1], HEAD_DIM=key.shape[2], NUM_HEADS=key.shape[1],
        BLOCK_H=triton.next_power_of_2(key.shape[1]), BLOCK_T=block_t, num_warps=num_warps, **stage,
    )  # fmt: skip


def fastdiv_matches(ops, caches, key, value, slots) -> bool:
    """fastdiv and the shipped write leave the same bytes: K and V rows and both scales."""
    for cache in caches:
        for t in cache:
            t.zero_()
    ops.qsa_store_int8_kv(key, value, *caches[0], slots)
    store_launch(ops, _gather_store_kernel, key, value, *caches[1], slots, STAGE=STAGES["fastdiv"])
    torch.cuda.synchronize()
    return all(torch.equal(a, b) for a, b in zip(*caches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    gen = torch.Generator().manual_seed(0)
    rows = []
    print("us per write, CUDA graph replay; % = copy's time / the arm's time (qsa_store_bench's yardstick)")
    print(f"{'size':<15}{'heads':>6}" + "".join(f"{a:>9}" for a in ARMS)
          + f"{'shipped %':>11}{'kcopy %':>9}{'gather %':>10}{'empty %':>9}{'fastdiv %':>11}  fastdiv exact")  # fmt: skip
    for heads in (2, 1):
        _, key_cache, value_cache, ks, vs = int8_kv_cache(layout, POOL_PAGES, PAGE, heads)
        checks = [int8_kv_cache(layout, POOL_PAGES, PAGE, heads)[1:] for _ in range(2)]
        for label, tokens, run in SIZES:
            key, value, src, dst = size_inputs(tokens, heads, gen)
            slots = slots_for("paged", tokens, run, gen)
            words = src.view(torch.int32), dst.view(torch.int32)
            cache = (key, value, key_cache, value_cache, ks, vs, slots)
            fns = {
                "copy": lambda src=src, dst=dst: dst.copy_(src),
                "kcopy": lambda w=words: _copy_words_kernel[(triton.cdiv(w[0].numel(), COPY_WORDS),)](
                    w[0], w[1], w[0].numel(), BLOCK=COPY_WORDS, num_warps=4),
                "empty": lambda cache=cache: store_launch(ops, _empty_store_kernel, *cache),
                **{arm: lambda cache=cache, stage=stage: store_launch(ops, _gather_store_kernel, *cache, STAGE=stage)
                   for arm, stage in STAGES.items()},
                "shipped": lambda cache=cache: ops.qsa_store_int8_kv(*cache),
            }
            fns["kcopy"]()
            torch.cuda.synchronize()
            assert torch.equal(src, dst), "kcopy did not copy"
            us = {a: 1e3 * t["graph"] for a, t in time_pair(fns, reps=args.reps, modes=("graph",)).items()}
            spread_key, spread_value, _, _ = size_inputs(tokens, heads, gen, spread=True)
            exact = all(fastdiv_matches(ops, checks, k, v, slots) for k, v in ((key, value), (spread_key, spread_value)))
            row = {"size": label, "tokens": tokens, "kv_heads": heads, "slots": "paged", "bytes_moved": 2 * src.numel(),
                   "us": us, "pct_of_copy": {a: 100 * us["copy"] / us[a] for a in ARMS}, "fastdiv_exact": exact}  # fmt: skip
            rows.append(row)
            pct = row["pct_of_copy"]
            print(f"{label:<15}{heads:>6}" + "".join(f"{us[a]:>9.2f}" for a in ARMS)
                  + f"{pct['shipped']:>11.1f}{pct['kcopy']:>9.1f}{pct['gather']:>10.1f}{pct['empty']:>9.1f}"
                  + f"{pct['fastdiv']:>11.1f}  {exact}", flush=True)  # fmt: skip
        del key_cache, value_cache, ks, vs, checks
        torch.cuda.empty_cache()
    write_json(args.out, "qsa-int8-store-floor-h200.json", {"arms": ARMS, "rows": rows, "versions": versions()})


if __name__ == "__main__":
    main()
