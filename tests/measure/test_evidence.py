"""The evidence contract round-trips, and load_gate_evidence skips benchmark files."""

from __future__ import annotations

import json

import pytest

from builder.errors import MeasureError
from builder.measure.evidence import (
    BenchEvidence,
    GateEvidence,
    ServerInfo,
    load_bench_evidence,
    load_gate_evidence,
    now,
    write_json_atomic,
)

SERVER = ServerInfo(url="http://x:1", served_model="m", max_model_len=2048, version="0.32.0", kv_cache_dtype="auto")


def test_gate_and_bench_files_load_back(tmp_path):
    ev = GateEvidence(gate="kv_pool", required=True, verdict="pass", summary="1 tokens", created=now(),
                      server=SERVER, server_version="0.32.0", config_digest="sha256:x", target="t",
                      observed={"kv_pool_tokens": 1})
    write_json_atomic(tmp_path / "kv_pool.json", ev)
    bench = {k: 1 for k in BenchEvidence.model_fields if k not in ("server", "created", "workload", "kind", "target", "config_digest")}
    bench.update(workload="decode", kind="decode", server=SERVER.model_dump(), created=now().isoformat(), p90_ttft_ms=2.0)
    (tmp_path / "bench-decode.json").write_text(json.dumps(bench))
    gates = load_gate_evidence(tmp_path)
    assert [g.gate for g in gates] == ["kv_pool"] and gates[0].server.kv_cache_dtype == "auto"
    benches = load_bench_evidence(tmp_path)
    assert benches[0].model_extra["p90_ttft_ms"] == 2.0  # vLLM keys beyond the typed ones are kept
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp files


def test_corrupt_gate_file_is_a_measure_error(tmp_path):
    (tmp_path / "needle.json").write_text('{"gate": "needle", "verdict": "maybe"}')
    with pytest.raises(MeasureError, match="needle.json"):
        load_gate_evidence(tmp_path)
