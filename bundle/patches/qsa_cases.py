"""Build QSA sparse-attention inputs for each KV cache dtype (GPU).

One place that lays out bf16, fp8 (per-tensor) and int8 (side-scale) caches the
way the patched backend does, fills them through the REAL write path (for int8:
``qsa_store_int8_kv``) and returns what the kernel and the reference need.
"""

from __future__ import annotations

import dataclasses
import itertools
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


def int8_kv_cache(layout, num_blocks: int, page: int, num_kv_heads: int, *, device="cuda", row_bytes: int = HEAD_DIM,
                  split_scales: bool = False):
    """An int8 cache laid out like the patched engine: pages of int8 rows, then
    the (K, V) fp32 scale pairs (carved by the engine's own function).

    ``row_bytes`` > D spaces the K and V rows of each (head, token) slot like an
    inline-scale (260) or padded (384, 512) layout; only benchmarks use that, to
    time the same kernel over other strides. Scales stay in the paired tail.
    ``split_scales`` lays the same tail out as the layout before the pairing (all
    K scales, then all V scales), which benchmarks time against the shipped one
    (the kernels take any scale strides).
    """
    slot = 2 * row_bytes
    data = num_kv_heads * page * slot
    page_bytes = data + layout.int8_scale_bytes_per_block(page, num_kv_heads)
    page_bytes = -(-page_bytes // 128) * 128
    raw = torch.zeros(num_blocks * page_bytes, dtype=torch.int8, device=device)
    kv_cache = raw.as_strided((num_blocks, num_kv_heads, page, slot), (page_bytes, page * slot, slot, 1))
    if row_bytes == HEAD_DIM and not split_scales:
        k_scales, v_scales = layout.carve_int8_scale_caches(kv_cache, head_dim=HEAD_DIM)
    else:
        storage = torch.empty(0, dtype=torch.float32, device=device).set_(raw.untyped_storage())
        if split_scales:
            strides, v_offset = (page_bytes // 4, num_kv_heads, 1), page * num_kv_heads
        else:
            strides, v_offset = layout.int8_scale_strides(page_bytes, num_kv_heads), 1
        k_scales, v_scales = (
            torch.as_strided(storage, (num_blocks, page, num_kv_heads), strides, data // 4 + side * v_offset)
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


# --- every int8 tile any table can pick, and windows up to 8192 tokens per split ---

# Arch tables the int8 dispatch has, as the (_is_sm90, _is_sm120) answers that
# select them; sm_80 and sm_121 (GB10) take the default table.
ARCH_TABLES = {"sm_90": (True, False), "sm_120": (False, True), "sm_80/sm_121": (False, False)}
# Tokens one row selects; with one split a program walks all of them.
WINDOWS = (128, 512, 1024, 2051, 4099, 8192)


def int8_table_entries(ops) -> dict[tuple[int, int, int], list[str]]:
    """(block_n, num_warps, splits) -> the arch tables whose int8 dispatch picks it.

    Every row count up to 8192, both kv-head counts and both configs, on each
    table, at a huge selection width (so num_splits == target_splits) and at
    each width limit of the sm_90 table (the most splits that entry launches).
    """
    widths = sorted({1 << 24} | {w for _, w, _ in ops._SM90_INT8_TABLE if w is not None})
    entries: dict[tuple[int, int, int], list[str]] = {}
    saved = ops._is_sm90, ops._is_sm120
    try:
        for arch, (sm90, sm120) in ARCH_TABLES.items():
            ops._is_sm90, ops._is_sm120 = (lambda v=sm90: v), (lambda v=sm120: v)
            for rows, kv_heads, prefill, width in itertools.product(range(1, 8193), (1, 2), (False, True), widths):
                block_n, warps, _, splits = ops._select_config(rows, kv_heads, prefill, width, False, True)
                archs = entries.setdefault((block_n, warps, splits), [])
                if arch not in archs:
                    archs.append(arch)
    finally:
        ops._is_sm90, ops._is_sm120 = saved
    return entries


def int8_entries_and_one_split(ops) -> dict[tuple[int, int, int], list[str]]:
    """int8_table_entries plus, for each tile shape, one split: the whole window in one program."""
    entries = int8_table_entries(ops)
    for block_n, warps, _ in list(entries):
        archs = entries.setdefault((block_n, warps, 1), [])
        if "one split" not in archs:
            archs.append("one split")
    return entries


class forced_int8_config:
    """Context manager: the dispatch picks (block_n, warps, target_splits) for every call."""

    def __init__(self, ops, block_n: int, warps: int, splits: int) -> None:
        self.ops, self.config = ops, (block_n, warps, splits)

    def __enter__(self):
        block_n, warps, splits = self.config
        self.saved = self.ops._select_config

        def forced(rows, kv_heads, prefill, columns, is_fp8=False, is_int8=False):
            tiles = -(-columns // block_n)
            return block_n, warps, tiles, min(splits, tiles)

        self.ops._select_config = forced
        return self

    def __exit__(self, *exc) -> None:
        self.ops._select_config = self.saved


def window_inputs(kind: str, *, width: int, rows: int = 16, device="cuda"):
    """Gaussian K/V and Q (``flat``: logits ~ N(0, 1)) or Q pointing at 4 of each
    row's selected keys (``peaked``: those logits ~8 above the rest). GQA 24/2,
    page 64, 2 requests of 16K tokens, random selections of ``width`` tokens.

    Returns (q, k, v, logical_indices, block_table, token_to_req, gate); k and v
    fp32 [blocks, page, 2, D].
    """
    if kind not in ("flat", "peaked"):
        raise ValueError(f"kind must be flat or peaked, not {kind!r}")
    gen = torch.Generator().manual_seed(width * 2 + (kind == "peaked"))
    page, kv_heads, q_heads, context, requests = 64, 2, 24, 16384, 2
    num_blocks = requests * context // page + 8
    k = torch.randn(num_blocks, page, kv_heads, HEAD_DIM, generator=gen)
    v = torch.randn(num_blocks, page, kv_heads, HEAD_DIM, generator=gen)
    idx, table, t2r = make_selection(
        rows=rows, width=width, requests=requests, pages_per_request=context // page,
        page=page, num_blocks=num_blocks, generator=gen, device="cpu",
    )  # fmt: skip
    q = torch.randn(rows, q_heads, HEAD_DIM, generator=gen)
    if kind == "peaked":
        group = q_heads // kv_heads
        hot = idx[:, torch.randint(0, width, (4,), generator=gen)].long()  # [rows, 4] logical tokens
        physical = table[t2r.long()[:, None], hot // page].long()
        hot_keys = k[physical, hot % page]  # [rows, 4, Hkv, D]
        pointer = 0.5 * hot_keys.sum(dim=1).repeat_interleave(group, dim=1)  # [rows, Hq, D]
        q = pointer + 0.3 * q
    gate = torch.randn(rows, q_heads, HEAD_DIM, generator=gen)
    return (
        q.to(device, torch.bfloat16), k.to(device), v.to(device), idx.to(device), table.to(device),
        t2r.to(device), gate.to(device, torch.bfloat16),
    )  # fmt: skip


def smollm2_units(data: dict, *, units: int = 2) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Real SmolLM2 K/V/Q (capture_smollm2_kv.py) as head_dim-256 units.

    A unit joins 4 consecutive layers' 64-dim rows of one kv head; its 3 real
    query heads (SmolLM2's group) are repeated 4 times to the kernel's group 12.
    Returns up to ``units`` of (q [query_rows, 12, 256], k [tokens, 256], v).
    """
    q, k, v = data["q"].float(), data["k"].float(), data["v"].float()
    layers, _, kv_heads, _ = k.shape
    group = q.shape[2] // kv_heads
    out = []
    for first in range(0, layers - 3, 4):
        for head in range(kv_heads):
            kk = torch.cat([k[first + i, :, head] for i in range(4)], dim=-1)
            vv = torch.cat([v[first + i, :, head] for i in range(4)], dim=-1)
            qs = [torch.cat([q[first + i, :, head * group + j] for i in range(4)], dim=-1) for j in range(group)]
            out.append((torch.stack(qs, dim=1).repeat(1, 12 // group, 1), kk, vv))
    return out[:units]


def causal_windows(positions: torch.Tensor, width: int) -> torch.Tensor:
    """Row at position p selects tokens max(0, p - width + 1) .. p; -1 pads, last column the count."""
    cols = torch.arange(width, device=positions.device)
    first = (positions - width + 1).clamp(min=0)
    index = first[:, None] + cols[None, :]
    index = torch.where(index <= positions[:, None], index, torch.full_like(index, -1))
    count = (index >= 0).sum(dim=1, keepdim=True)
    return torch.cat([index, count], dim=1).to(torch.int32)


def smollm2_window_inputs(data: dict, *, width: int, rows: int = 16, device="cuda"):
    """The last ``rows`` captured positions attending causal windows of ``width``
    real SmolLM2 tokens (peaked, real attention). Two units as 2 kv heads (GQA 24/2).
    Same return shape as window_inputs."""
    units = smollm2_units(data, units=2)
    page = 64
    tokens = units[0][1].shape[0] - units[0][1].shape[0] % page
    k = torch.stack([kk[:tokens] for _, kk, _ in units], dim=1).view(tokens // page, page, len(units), HEAD_DIM)
    v = torch.stack([vv[:tokens] for _, _, vv in units], dim=1).view(tokens // page, page, len(units), HEAD_DIM)
    first_query, stop = data["query_positions"]
    take = [p - first_query for p in range(min(stop, tokens) - rows, min(stop, tokens))]
    q = torch.cat([qq[take] for qq, _, _ in units], dim=1)  # [rows, 12 * units, D]
    positions = torch.tensor([first_query + t for t in take])
    logical = causal_windows(positions, width)
    table = torch.arange(tokens // page, dtype=torch.int32)[None, :]
    t2r = torch.zeros(rows, dtype=torch.int32)
    gate = torch.randn(rows, q.shape[1], HEAD_DIM, generator=torch.Generator().manual_seed(width))
    return (
        q.to(device, torch.bfloat16), k.to(device), v.to(device), logical.to(device), table.to(device),
        t2r.to(device), gate.to(device, torch.bfloat16),
    )  # fmt: skip
