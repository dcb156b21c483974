"""Torch references for the QSA INT8 patch: quantize-on-write and sparse paged GQA.

Pure torch, device-agnostic (CPU in CI, CUDA on the GPU machine). Shared by
tests/gpu/test_qsa_int8.py, the CPU tests and the benchmarks so that every check compares
against the same definitions.
"""

from __future__ import annotations

import torch

INT8_SCALE_FLOOR = 1e-6
FP8_E4M3_MAX = 448.0


def round_half_away(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 to the nearest integer, ties away from zero, exactly.

    ``trunc(x + 0.5)`` is wrong just below .5 (x + 0.5 rounds up), so take the
    fraction, which fp32 represents exactly.
    """
    whole = torch.trunc(x)
    frac = x - whole
    return whole + torch.where(frac.abs() >= 0.5, torch.sign(x), torch.zeros_like(x))


def quantize_int8_per_row(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's int8_per_token_head convention over the last dim.

    scale = max(absmax / 127, 1e-6); q = round_half_away(x * (1 / scale)),
    clamped to [-128, 127]. Returns (int8 values, fp32 scales).
    """
    xf = x.float()
    absmax = xf.abs().amax(dim=-1)
    # Tensor / tensor: torch turns "/ python_scalar" into a multiply by the
    # rounded reciprocal, which is not the IEEE quotient the kernels compute.
    scale = torch.clamp(absmax / torch.full_like(absmax, 127.0), min=INT8_SCALE_FLOOR)
    inverse = torch.ones_like(scale) / scale
    q = round_half_away(xf * inverse.unsqueeze(-1))
    return q.clamp(-128.0, 127.0).to(torch.int8), scale


def fp8_per_tensor_scale(x: torch.Tensor) -> float:
    """Per-tensor e4m3 scale as a calibrated fp8 KV cache would use it."""
    return max(float(x.float().abs().amax()) / FP8_E4M3_MAX, 1e-12)


def qsa_sparse_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logical_indices: torch.Tensor,
    block_table: torch.Tensor,
    token_to_req: torch.Tensor,
    output_gate: torch.Tensor,
    *,
    chunk_rows: int = 64,
) -> torch.Tensor:
    """fp32 QSA sparse paged GQA, gate included.

    q: [rows, Hq, D]; k, v: fp32 [blocks, page, Hkv, D] (already dequantized);
    logical_indices: [rows, W + 1], column W is the valid-entry count;
    block_table: [requests, pages]; token_to_req: [rows]. A column counts when
    it is below the count, its index is >= 0, its request exists, its logical
    page is inside the table and its physical page inside the cache. Rows with
    nothing valid give zeros. Output is fp32 [rows, Hq, D].
    """
    rows, num_q_heads, head_dim = q.shape
    num_blocks, page, num_kv_heads, _ = k.shape
    group = num_q_heads // num_kv_heads
    width = logical_indices.shape[1] - 1
    num_requests, table_width = block_table.shape
    out = torch.zeros(rows, num_q_heads, head_dim, dtype=torch.float32, device=q.device)
    columns = torch.arange(width, device=q.device)
    for start in range(0, rows, chunk_rows):
        stop = min(rows, start + chunk_rows)
        index = logical_indices[start:stop, :width].long()
        count = logical_indices[start:stop, width].long()
        request = token_to_req[start:stop].long()
        valid = (index >= 0) & (columns[None, :] < count[:, None])
        valid &= ((request >= 0) & (request < num_requests))[:, None]
        safe_index = index.clamp(min=0)
        logical_page = safe_index // page
        valid &= logical_page < table_width
        safe_request = request.clamp(0, num_requests - 1)
        physical = block_table[safe_request[:, None], logical_page.clamp(max=table_width - 1)].long()
        valid &= (physical >= 0) & (physical < num_blocks)
        physical = physical.clamp(0, num_blocks - 1)
        offset = safe_index % page
        keys = k[physical, offset]  # [r, W, Hkv, D]
        values = v[physical, offset]
        query = q[start:stop].float().view(stop - start, num_kv_heads, group, head_dim)
        scores = torch.einsum("rhgd,rwhd->rhgw", query, keys) * head_dim**-0.5
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        attended = torch.einsum("rhgw,rwhd->rhgd", probs, values)
        gate = torch.sigmoid(output_gate[start:stop].float())
        out[start:stop] = attended.reshape(stop - start, num_q_heads, head_dim) * gate
    return out


def relative_rms_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected||_2 / ||expected||_2 over all elements."""
    diff = (actual.float() - expected.float()).pow(2).sum().sqrt()
    return float(diff / expected.float().pow(2).sum().sqrt().clamp(min=1e-30))
