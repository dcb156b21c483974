"""The model card: valid Hub metadata, and numbers only from evidence ("not measured" otherwise)."""

from __future__ import annotations

import json
import re

import pytest
from huggingface_hub import ModelCard

from builder.config import config_digest, launch_plan, load_target
from builder.errors import RenderError
from builder.render import card_context, render_card


def _card(tmp_path, target="gb10", files=("README.md",)):
    cfg = load_target(target)
    ctx = card_context(cfg=cfg, plan=launch_plan(cfg), evidence_dir=tmp_path / target, files=list(files))
    return cfg, render_card(ctx)


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _gate(tmp_path, target, name, **extra):
    d = tmp_path / target
    d.mkdir(exist_ok=True)
    data = {"gate": name, "required": True, "verdict": "pass", "summary": "3/3", "created": "2026-11-20T10:00:00Z"}
    (d / f"{name}.json").write_text(json.dumps({**data, **extra}))


def _bench(tmp_path, target, workload, **metrics):
    d = tmp_path / target
    d.mkdir(exist_ok=True)
    (d / f"bench-{workload}.json").write_text(json.dumps({"workload": workload, **metrics}))


def test_metadata_loads_with_huggingface_hub(tmp_path):
    cfg, text = _card(tmp_path, "cmp170hx-x2")
    data = ModelCard(text).data
    assert data.library_name == "vllm"
    assert data.base_model == cfg.model.base_model
    assert data.license == "apache-2.0"
    assert {"vllm", "int8-per-token-head", "cmp170hx-x2"} <= set(data.tags)


def test_without_evidence_nothing_is_invented(tmp_path):
    _, text = _card(tmp_path)
    for title in ("Quality gates", "Benchmarks"):
        body = _section(text, title)
        assert "not measured" in body
        assert "PASS" not in body and "| ---" not in body
    assert not re.search(r"\bms\b|tok/s", _section(text, "Benchmarks"))


def test_evidence_values_are_shown(tmp_path):
    cfg = load_target("gb10")
    _gate(tmp_path, "gb10", "golden_probes", config_digest=config_digest(cfg))
    _gate(tmp_path, "gb10", "needle", verdict="fail", summary="MISS at 128K", required=False, config_digest="sha256:x")
    _bench(tmp_path, "gb10", "decode", mean_ttft_ms=1234.5, median_tpot_ms=12.345, output_throughput=456.7)
    _bench(tmp_path, "gb10", "prefill", output_throughput=99.0)
    _, text = _card(tmp_path)

    gates = _section(text, "Quality gates")
    assert "| golden_probes | yes | PASS | 3/3 | 2026-11-20 | this config |" in gates
    assert "| needle | no | FAIL | MISS at 128K | 2026-11-20 | another config |" in gates

    bench = _section(text, "Benchmarks")
    assert "| workload | TTFT mean (ms) | TPOT median (ms) | output tok/s |" in bench
    assert "| decode | 1,234.5 | 12.35 | 456.7 |" in bench
    assert "| prefill | not measured | not measured | 99.0 |" in bench


def test_bad_benchmark_file_is_an_error_not_a_blank(tmp_path):
    (tmp_path / "gb10").mkdir()
    (tmp_path / "gb10" / "bench-x.json").write_text("{not json")
    with pytest.raises(RenderError, match="bench-x.json"):
        _card(tmp_path)


def test_files_are_listed_with_their_role(tmp_path):
    _, text = _card(tmp_path, files=("launch/run_qsa_int8kv.sh", "patches/series", "evidence/bench-a.json"))
    files = _section(text, "Files")
    assert "| `launch/run_qsa_int8kv.sh` | launch recipe;" in files
    assert "| `patches/series` | order in which the patches apply |" in files
    assert "| `evidence/bench-a.json` | benchmark result" in files


def test_plan_warnings_are_caveats(tmp_path):
    # gb10 against a series without the ple-mmap patch has a known gap.
    cfg = load_target("gb10")
    plan = launch_plan(cfg, series={"qsa-int8"})
    text = render_card(card_context(cfg=cfg, plan=plan, evidence_dir=tmp_path / "gb10", files=["README.md"]))
    assert plan.warnings
    assert all(w in _section(text, "Caveats") for w in plan.warnings)


def test_only_top_level_gate_files_are_called_gate_evidence():
    from builder.render.card import describe_file

    assert describe_file("evidence/needle.json").startswith("gate evidence")
    assert describe_file("evidence/bench-decode.json").startswith("benchmark result")
    assert describe_file("evidence/kernels/qsa-aot-sm_90.json").startswith("patched-kernel evidence")
    assert describe_file("evidence/kv-bfloat16/needle.json").startswith("supporting run")
