"""The patched QSA backend inside a real vllm 0.33.0 install (CPU): dtype acceptance and honest page size.

The checks live in builder.selfcheck.engine, which the GPU images also run on their own engine at
the end of every build (`qfn-selfcheck`). Here they need the full engine on the host (vllm with
its CUDA torch, several GB), so CI skips this file; run it in a venv where
`pip install vllm==0.33.0` and `builder patches apply --to <site-packages>` were done.
"""

from __future__ import annotations

import pytest

from builder.selfcheck import engine as checks

pytest.importorskip("vllm.v1.kv_cache_interface")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("vllm.models.qwen4_exp.nvidia.model")
    try:
        return checks.patched_backend()
    except checks.NotPatched as exc:
        pytest.fail(str(exc))


def test_accepts_int8_per_token_head(backend):
    checks.check_dtype_acceptance(backend)


def test_page_size_counts_side_scales(backend):
    checks.check_page_size(backend)


@pytest.mark.parametrize("layout_name", checks.LAYOUTS)
def test_scale_views_carved_from_vllm_allocated_pages(backend, layout_name):
    checks.check_scale_views(backend, layout_name)
