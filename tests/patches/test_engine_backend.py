"""The patched QSA backend inside a real vllm 0.33.0 install (CPU): dtype acceptance and honest page size.

Needs the full engine (vllm with its CUDA torch, several GB), so CI skips it; run it
in a venv where `pip install vllm==0.33.0` and `builder patches apply --to <site-packages>`
were done.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm.v1.kv_cache_interface")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def backend():
    # model.py and qsa.py import each other upstream; vLLM enters through model.py.
    pytest.importorskip("vllm.models.qwen4_exp.nvidia.model")
    qsa = pytest.importorskip("vllm.models.qwen4_exp.nvidia.qsa")
    if not hasattr(qsa, "QSA_KV_CACHE_DTYPES"):
        pytest.fail("the installed vllm is not patched: run `builder patches apply --to <site-packages>`")
    return qsa.Qwen4ExpQSAFlashAttentionBackend


def _spec(dtype_str: str, torch_dtype):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode

    return FullAttentionSpec(
        block_size=64, num_kv_heads=2, head_size=256, head_size_v=256,
        dtype=torch_dtype, kv_quant_mode=get_kv_quant_mode(dtype_str),
    )  # fmt: skip


def test_accepts_int8_per_token_head(backend):
    assert backend.supports_kv_cache_dtype("int8_per_token_head")
    assert backend.supports_kv_cache_dtype("fp8_e4m3")
    assert not backend.supports_kv_cache_dtype("int4_per_token_head")


def test_page_size_counts_side_scales(backend):
    from vllm.v1.worker.utils import customize_attention_spec

    int8 = _spec("int8_per_token_head", torch.int8)
    assert int8.page_size_bytes == 64 * 2 * 512  # upstream: data only
    custom = customize_attention_spec(backend, backend.customize_spec(int8))
    assert custom.page_size_bytes == 64 * 2 * 512 + 2 * 64 * 2 * 4
    assert custom.page_size_bytes % 128 == 0
    bf16 = _spec("auto", torch.bfloat16)
    assert backend.customize_spec(bf16) == bf16
    fp8 = _spec("fp8_e4m3", torch.uint8)
    assert backend.customize_spec(fp8) == fp8


@pytest.mark.parametrize("layout_name", ["LBHNC", "LBNHC", "BLHNC", "BLNHC"])
def test_scale_views_carved_from_vllm_allocated_pages(backend, layout_name):
    """vLLM's own view builder over a padded page: scales land in the tail, never in any
    layer's K/V rows, and the rows pass the 128-byte lint."""
    from vllm.models.qwen4_exp.nvidia.ops.qsa_kv_layout import (
        carve_int8_scale_caches,
        check_kv_row_alignment,
    )
    from vllm.v1.kv_cache_interface import KVCacheTensor, create_kv_cache_views
    from vllm.v1.kv_cache_layout import KVCacheLayout

    spec = backend.customize_spec(_spec("int8_per_token_head", torch.int8))
    num_blocks, layers, page = 5, 2, spec.page_size_bytes
    block_outer = layout_name.startswith("B")
    tensor = KVCacheTensor(
        size=num_blocks * layers * page, layers=["a", "b"],
        layer_stride=page if block_outer else page * num_blocks,
        block_stride=page * layers if block_outer else page,
    )  # fmt: skip
    raw = torch.zeros(tensor.size, dtype=torch.int8)
    views = create_kv_cache_views(raw, spec, num_blocks, KVCacheLayout[layout_name], tensor)
    for view in views:
        view.fill_(7)  # every K/V byte of both layers
    for view in views:
        k_rows, v_rows = view.transpose(1, 2).split(256, dim=-1)
        assert check_kv_row_alignment(k_rows, name="K") == [] and check_kv_row_alignment(v_rows, name="V") == []
        k_scales, v_scales = carve_int8_scale_caches(view, head_dim=256)
        assert torch.all(k_scales == 0) and torch.all(v_scales == 0)  # tail untouched by K/V
        k_scales.fill_(1.5)
        v_scales.fill_(2.5)
    for view in views:
        assert torch.all(view == 7)  # scales never overwrote K/V rows
    assert int((raw == 7).sum()) == num_blocks * layers * 64 * 2 * 512
