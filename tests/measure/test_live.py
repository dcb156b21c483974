"""Against a real vLLM server: the streaming client, /metrics and three cheap gates.

The server is the session's cpu-smoke container (tests/conftest.py builds and serves it), or
QFN_MEASURE_URL=http://host:port of one started elsewhere. About 30-60 s on 2 CPU cores once it
is up: short prompts only, no needle or prefill sweep.
"""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest

from builder.measure import client as bench
from builder.measure.evidence import load_gate_evidence
from builder.measure.gates import run_gates_async
from builder.measure.settings import GateSettings
from builder.config.models import Gates

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def url(cpu_smoke_url):
    return cpu_smoke_url


def test_streamed_request_has_vllm_timings_and_usage(url):
    async def go():
        async with httpx.AsyncClient() as client:
            model, _ = await bench._served_model(client, url)
            prompt = await bench.make_prompt(client, url, model, 200, tag=secrets.token_hex(4))
            out = await bench.stream_request(client, url, model, bench.RequestSpec(max_tokens=12, prompt=prompt))
            samples = await bench.scrape(client, url)
            return out, samples

    out, samples = asyncio.run(go())
    assert out.success, out.error
    assert out.output_tokens == 12  # ignore_eos: exactly max_tokens, counted by the server's usage
    assert 190 <= out.prompt_tokens <= 200  # make_prompt fits the server's own tokenizer
    assert 0 < out.ttft < out.latency and len(out.itl) == out.events - 1
    assert bench.kv_pool_tokens(samples) > 0


def test_cheap_gates_pass_and_write_evidence(url, tmp_path):
    settings = GateSettings(
        gates=Gates(determinism_runs=4), expectations="smollm2-135m-instruct", needle_tokens=512,
        prefix_tokens=512, kv_pool_floor_tokens=2048, kv_pool_target_tokens=2048,
    )
    results = asyncio.run(run_gates_async(
        url=url, target="cpu-smoke", settings=settings, config_digest="sha256:test", out_dir=tmp_path,
        only=["golden_probes", "determinism", "kv_pool"],
    ))
    assert [r.verdict for r in results] == ["pass", "pass", "pass"], [r.summary for r in results]
    loaded = load_gate_evidence(tmp_path)
    assert {g.gate for g in loaded} == {"golden_probes", "determinism", "kv_pool"}
    golden = next(g for g in loaded if g.gate == "golden_probes")
    assert len(golden.records) == 3 and golden.records[0]["request"]["temperature"] == 0.0
    assert golden.server.version
