"""CPU: the patched QSA ops' host-side checks, run on the real patched ops/qsa.py (no GPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def ops(patched_tree):
    from builder.patches import aot

    return aot._loader().load_qsa_ops(patched_tree, capability=(9, 0))


def _call(ops, *, head_dim: int, scale_heads: int = 2):
    """One int8 call on CPU tensors: 24 query heads over 2 kv heads, scales for scale_heads."""
    rows, q_heads, kv_heads, page, blocks, width = 4, 24, 2, 16, 8, 32
    q = torch.zeros(rows, q_heads, head_dim, dtype=torch.bfloat16)
    cache = torch.zeros(blocks, page, kv_heads, head_dim, dtype=torch.int8)
    scales = torch.ones(blocks, page, scale_heads)
    return ops.qsa_sparse_paged_attention(
        q, cache, cache, torch.zeros(rows, width + 1, dtype=torch.int32), torch.zeros(1, blocks, dtype=torch.int32),
        torch.zeros(rows, dtype=torch.int32), True, output_gate=torch.zeros_like(q),
        k_scale_cache=scales, v_scale_cache=scales,
    )  # fmt: skip


def test_int8_cache_with_head_dim_below_64_is_refused_with_the_reason(ops):
    with pytest.raises(ValueError, match=r"head_dim >= 64, got 32"):
        _call(ops, head_dim=32)


def test_int8_scale_tensors_of_the_wrong_shape_are_refused(ops):
    with pytest.raises(ValueError, match=r"fp32 k_scale_cache and v_scale_cache shaped \(8, 16, 2\)"):
        _call(ops, head_dim=256, scale_heads=1)
