"""Build QSA sparse-attention inputs for each KV cache dtype (GPU).

One place that lays out bf16, fp8 (per-tensor) and int8 (side-scale) caches the
way the patched backend does, fills them through the REAL write path (for int8:
``qsa_store_int8_kv``) and returns what the kernel and the reference need.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from qsa_reference import fp8_per_tensor_scale

HEAD_DIM = 256


@dataclasses.dataclass
class Cache:
    """A filled KV cache and its dequantized fp32 copy for the reference."""

    dtype: str
    key_cache: torch.Tensor  # [blocks, page, Hkv, D] view handed to the kernel
    value_cache: torch.Tensor
    kwargs: dict[str, Any]  # k_scale / v_scale / k_scale_cache / v_scale_cache
    k_ref: torch.Tensor  # fp32 [blocks, page, Hkv, D] as the kernel sees it
    v_ref: torch.Tensor
    kv_cache: torch.Tensor  # the layer's [blocks, Hkv, page, 2D] cache


def int8_kv_cache(layout, num_blocks: int, page: int, num_kv_heads: int, *, device="cuda", row_bytes: int = HEAD_DIM):
    """An int8 cache laid out like the patched engine: pages of int8 rows, then
    the K and V fp32 scale tails (carved by the engine's own function).

    ``row_bytes`` > D spaces the K and V rows of each (head, token) slot like an
    inline-scale (260) or padded (384, 512) layout; only benchmarks use that, to
    time the same kernel over other strides. Scales stay in the side tails.
    """
    slot = 2 * row_bytes
    data = num_kv_heads * page * slot
    page_bytes = data + layout.int8_scale_bytes_per_block(page, num_kv_heads)
    page_bytes = -(-page_bytes // 128) * 128
    raw = torch.zeros(num_blocks * page_bytes, dtype=torch.int8, device=device)
    kv_cache = raw.as_strided((num_blocks, num_kv_heads, page, slot), (page_bytes, page * slot, slot, 1))
    if row_bytes == HEAD_DIM:
        k_scales, v_scales = layout.carve_int8_scale_caches(kv_cache, head_dim=HEAD_DIM)
    else:
        storage = torch.empty(0, dtype=torch.float32, device=device).set_(raw.untyped_storage())
        per_block = page * num_kv_heads
        k_scales, v_scales = (
            torch.as_strided(storage, (num_blocks, page, num_kv_heads), (page_bytes // 4, num_kv_heads, 1), data // 4 + side * per_block)
            for side in range(2)
        )
    rows = kv_cache.transpose(1, 2)
    key_cache = rows[..., :HEAD_DIM]
    value_cache = rows[..., row_bytes : row_bytes + HEAD_DIM]
    return kv_cache, key_cache, value_cache, k_scales, v_scales


def make_cache(ops, layout, dtype: str, k: torch.Tensor, v: torch.Tensor, *, row_bytes: int = HEAD_DIM) -> Cache:
    """Fill a cache of ``dtype`` from fp32 K/V ``[blocks, page, Hkv, D]``."""
    num_blocks, page, num_kv_heads, head_dim = k.shape
    device = k.device
    if dtype == "int8":
        kv_cache, key_cache, value_cache, ks, vs = int8_kv_cache(layout, num_blocks, page, num_kv_heads, device=device, row_bytes=row_bytes)
        slots = torch.arange(num_blocks * page, device=device, dtype=torch.int64)
        ops.qsa_store_int8_kv(
            k.reshape(-1, num_kv_heads, head_dim).to(torch.bfloat16),
            v.reshape(-1, num_kv_heads, head_dim).to(torch.bfloat16),
            key_cache,
            value_cache,
            ks,
            vs,
            slots,
        )
        k_ref = key_cache.float() * ks.unsqueeze(-1)
        v_ref = value_cache.float() * vs.unsqueeze(-1)
        return Cache(dtype, key_cache, value_cache, {"k_scale_cache": ks, "v_scale_cache": vs}, k_ref, v_ref, kv_cache)
    if dtype == "bf16":
        kv_cache = torch.empty(num_blocks, num_kv_heads, page, 2 * head_dim, dtype=torch.bfloat16, device=device)
        key_cache, value_cache = kv_cache.transpose(1, 2).split(head_dim, dim=-1)
        key_cache.copy_(k)
        value_cache.copy_(v)
        return Cache(dtype, key_cache, value_cache, {}, key_cache.float(), value_cache.float(), kv_cache)
    if dtype == "fp8":
        # The fp8 cache stores bf16 K/V (as the model writes them) / scale.
        kb, vb = k.to(torch.bfloat16).float(), v.to(torch.bfloat16).float()
        k_scale, v_scale = fp8_per_tensor_scale(kb), fp8_per_tensor_scale(vb)
        kv_cache = torch.empty(num_blocks, num_kv_heads, page, 2 * head_dim, dtype=torch.uint8, device=device)
        e4m3 = kv_cache.view(torch.float8_e4m3fn)
        key_cache, value_cache = e4m3.transpose(1, 2).split(head_dim, dim=-1)
        key_cache.copy_((kb / k_scale).to(torch.float8_e4m3fn))
        value_cache.copy_((vb / v_scale).to(torch.float8_e4m3fn))
        return Cache(
            dtype,
            key_cache,
            value_cache,
            {"k_scale": k_scale, "v_scale": v_scale},
            key_cache.float() * k_scale,
            value_cache.float() * v_scale,
            kv_cache,
        )
    raise ValueError(f"dtype must be bf16, fp8 or int8, not {dtype!r}")


def make_selection(
    *,
    rows: int,
    width: int,
    requests: int,
    pages_per_request: int,
    page: int,
    num_blocks: int,
    generator: torch.Generator,
    device="cuda",
):
    """Random selection rows over a shuffled block table.

    Returns (logical_indices [rows, width+1] int32, block_table int32,
    token_to_req int32). Every column is a valid index; tests then punch the
    edge cases into it.
    """
    context = pages_per_request * page
    perm = torch.randperm(num_blocks, generator=generator)[: requests * pages_per_request]
    if perm.numel() < requests * pages_per_request:
        raise ValueError("cache too small for the block table")
    block_table = perm.view(requests, pages_per_request).to(torch.int32)
    token_to_req = (torch.arange(rows) % requests).to(torch.int32)
    picks = torch.randint(0, context, (rows, width), generator=generator, dtype=torch.int32)
    counts = torch.full((rows, 1), width, dtype=torch.int32)
    logical_indices = torch.cat([picks, counts], dim=1)
    return logical_indices.to(device), block_table.to(device), token_to_req.to(device)
