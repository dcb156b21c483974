"""CPU-side checks of the patched QSA backend inside a real vllm 0.33.0 install.

One source for tests/patches/test_engine_backend.py and the in-image self-check: dtype
acceptance, the honest page size (side scales counted), and scale views carved from pages
vLLM itself allocates.
"""

from __future__ import annotations

from collections.abc import Callable

LAYOUTS = ("LBHNC", "LBNHC", "BLHNC", "BLNHC")


class NotPatched(AssertionError):
    """The installed engine lacks the int8 patch series."""


def patched_backend():
    """The patched QSA backend class; NotPatched when the engine is upstream's."""
    # model.py and qsa.py import each other upstream; vLLM enters through model.py.
    import vllm.models.qwen4_exp.nvidia.model  # noqa: F401
    from vllm.models.qwen4_exp.nvidia import qsa

    if not hasattr(qsa, "QSA_KV_CACHE_DTYPES"):
        raise NotPatched("the installed vllm is not patched: run `builder patches apply --to <site-packages>`")
    return qsa.Qwen4ExpQSAFlashAttentionBackend


def _spec(dtype_str: str, torch_dtype):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode

    return FullAttentionSpec(
        block_size=64, num_kv_heads=2, head_size=256, head_size_v=256,
        dtype=torch_dtype, kv_quant_mode=get_kv_quant_mode(dtype_str),
    )  # fmt: skip


def check_dtype_acceptance(backend) -> str:
    assert backend.supports_kv_cache_dtype("int8_per_token_head"), "int8_per_token_head refused"
    assert backend.supports_kv_cache_dtype("fp8_e4m3"), "fp8_e4m3 refused"
    assert not backend.supports_kv_cache_dtype("int4_per_token_head"), "int4_per_token_head accepted"
    return "accepts int8_per_token_head and fp8_e4m3, refuses int4_per_token_head"


def check_page_size(backend) -> str:
    import torch
    from vllm.v1.worker.utils import customize_attention_spec

    int8 = _spec("int8_per_token_head", torch.int8)
    assert int8.page_size_bytes == 64 * 2 * 512, f"upstream int8 page {int8.page_size_bytes} B"  # data only
    custom = customize_attention_spec(backend, backend.customize_spec(int8))
    want = 64 * 2 * 512 + 2 * 64 * 2 * 4
    assert custom.page_size_bytes == want, f"int8 page {custom.page_size_bytes} B, want {want} B (K/V + side scales)"
    assert custom.page_size_bytes % 128 == 0, f"int8 page {custom.page_size_bytes} B is not 128-byte aligned"
    bf16 = _spec("auto", torch.bfloat16)
    assert backend.customize_spec(bf16) == bf16, "bf16 spec changed"
    fp8 = _spec("fp8_e4m3", torch.uint8)
    assert backend.customize_spec(fp8) == fp8, "fp8 spec changed"
    return f"int8 page {custom.page_size_bytes} B = K/V {64 * 2 * 512} B + side scales {2 * 64 * 2 * 4} B; bf16/fp8 unchanged"


def check_scale_views(backend, layout_name: str) -> str:
    """vLLM's own view builder over a padded page: scales land in the tail, never in any
    layer's K/V rows, and the rows pass the 128-byte lint."""
    import torch
    from vllm.models.qwen4_exp.nvidia.ops.qsa_kv_layout import carve_int8_scale_caches, check_kv_row_alignment
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
        problems = check_kv_row_alignment(k_rows, name="K") + check_kv_row_alignment(v_rows, name="V")
        assert problems == [], f"{layout_name}: {problems}"
        k_scales, v_scales = carve_int8_scale_caches(view, head_dim=256)
        assert torch.all(k_scales == 0) and torch.all(v_scales == 0), f"{layout_name}: K/V bytes landed in the scale tail"
        k_scales.fill_(1.5)
        v_scales.fill_(2.5)
    for view in views:
        assert torch.all(view == 7), f"{layout_name}: scales overwrote K/V rows"
    written = int((raw == 7).sum())
    assert written == num_blocks * layers * 64 * 2 * 512, f"{layout_name}: {written} K/V bytes"
    return f"{layout_name}: scales in the page tail, K/V rows intact and 128-byte aligned"


def engine_checks() -> list[tuple[str, Callable[[object], str]]]:
    """(name, check(backend)) in the order they run."""
    checks: list[tuple[str, Callable[[object], str]]] = [
        ("kv dtype acceptance", check_dtype_acceptance),
        ("page size counts side scales", check_page_size),
    ]
    for layout in LAYOUTS:
        checks.append((f"scale views ({layout})", lambda backend, layout=layout: check_scale_views(backend, layout)))
    return checks
