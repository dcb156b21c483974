"""Markdown and chart rendering of cpu-smoke benchmark files (fixtures/cpu-smoke-bench, see fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.measure.evidence import load_bench_evidence
from builder.measure.report import bench_chart_png, bench_markdown

BENCH = Path(__file__).parent / "fixtures" / "cpu-smoke-bench"


def test_markdown_has_one_row_per_workload_and_the_concurrent2_wall_time():
    results = load_bench_evidence(BENCH)
    assert {r.kind for r in results} == {"prefill", "decode", "concurrent2", "concurrency"}
    md = bench_markdown(results, title="cpu-smoke")
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| workload")]
    assert len(rows) == len(results)
    conc2 = next(r for r in results if r.kind == "concurrent2")
    assert f"**{conc2.duration:.2f} s**" in md


def test_chart_is_a_png():
    pytest.importorskip("matplotlib")
    png = bench_chart_png(load_bench_evidence(BENCH), title="cpu-smoke")
    assert png is not None and png.startswith(b"\x89PNG\r\n\x1a\n")
