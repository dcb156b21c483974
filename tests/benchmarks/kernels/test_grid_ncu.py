"""The ncu side of the kernel grid: an H200 profile (fixtures/, see its README) parses into one row
per launch, in order, and the grid report names profiled misses from their counters."""

from __future__ import annotations

import json
import sys

import pytest

from pathlib import Path

from benchmarks.kernels import grid_ncu, grid_report

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_profile_parses_to_one_row_per_launch_in_order(tmp_path, monkeypatch):
    text = (FIXTURES / "ncu-grid-misses-h200.txt").read_text()
    kernels = grid_ncu.parse(text)
    assert len(kernels) == 8
    assert [k["kernel"] for k in kernels] == ["_qsa_sparse_paged_gqa_splitk_kernel", "_qsa_sparse_paged_int8_splitk_kernel"] * 4
    assert all({"duration_us", "dram_pct", "l2_pct", "l2_hit_pct", "cycles_per_issue"} <= k.keys() for k in kernels)
    assert kernels[0]["duration_us"] == pytest.approx(251.01)  # ctx32K decode 64x5 w2051 24/2, fp8
    assert kernels[0]["mem_tbps"] == pytest.approx(2.80)  # the workload section's rate, not SpeedOfLight's percentage
    source = tmp_path / "ncu.txt"
    source.write_text(text)
    monkeypatch.setattr(sys, "argv", ["grid_ncu.py", "--table", str(source), "--out", str(tmp_path)])
    grid_ncu.main()
    # The table the full run wrote from the untrimmed profile, for these launches.
    written = json.loads((FIXTURES / "qsa-grid-ncu-h200.json").read_text())["rows"][:8]
    assert json.loads((tmp_path / "qsa-grid-ncu-h200.json").read_text()) == {"source": "ncu.txt", "rows": written}


def test_a_profile_whose_launch_count_differs_is_refused(tmp_path, monkeypatch):
    text = (FIXTURES / "ncu-grid-misses-h200.txt").read_text()
    order = [line for line in text.splitlines() if line.startswith(grid_ncu.ORDER_TAG)][-1]
    source = tmp_path / "ncu.txt"
    source.write_text(text.replace(order, grid_ncu.ORDER_TAG + json.dumps([["p", "fp8"]])))
    monkeypatch.setattr(sys, "argv", ["grid_ncu.py", "--table", str(source), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="8 profiled kernels for 1 launches"):
        grid_ncu.main()


def test_profiled_misses_are_named_from_their_counters():
    """A grid and its decode and prefill profiles (fixtures/): each profiled miss gets the limiter its counters say."""
    grid = json.loads((FIXTURES / "qsa-grid-h200.json").read_text())
    profiled = grid_report.load_profiled([FIXTURES / "qsa-grid-ncu-h200.json", FIXTURES / "qsa-grid-ncu-prefill-h200.json"])
    lines = {line.split(":")[0].strip(): line for line in grid_report.summary(grid, profiled).splitlines()
             if line.startswith("  ctx")}
    assert "latency at low occupancy (profiled)" in lines["ctx32K prefill 512 w4099 12/1"]
    assert "latency at low occupancy (profiled)" in lines["ctx32K prefill 2048 w2051 24/2"]
    assert "memory (profiled)" in lines["ctx128K decode 256x5 w4099 12/1"]
    assert "memory (profiled)" in lines["ctx128K prefill 512 w4099 24/2"]
    assert "latency (profiled)" in lines["ctx256K decode 1x5 w2051 24/2"]
    # Unprofiled 128K+ prefill misses quote the profiles' own L2 range, not a fixed one.
    ranges = grid_report.prefill_l2_ranges(profiled)
    assert (f"int8 drives at {ranges['int8']} of its peak at the profiled 128K-256K prefill points (fp8 {ranges['fp8']})"
            in lines["ctx256K prefill 2048 w4099 12/1"])
    # Control: without the profiles no miss is labelled profiled, and no prefill miss is called "bytes".
    assert "(profiled)" not in grid_report.summary(grid).split("misses (")[1]
    assert not any("bytes:" in line for name, line in lines.items() if "prefill" in name)


def _point(int8_l2: float, fp8_l2: float, int8_dram: float = 50.0) -> dict:
    return {"int8": {"l2_pct": int8_l2, "dram_pct": int8_dram}, "fp8": {"l2_pct": fp8_l2, "dram_pct": 40.0}}


def test_prefill_l2_range_counts_only_memory_bound_points_from_128k():
    profiled = {
        "ctx128K prefill 512 w4099 24/2": _point(84.2, 74.9),
        "ctx256K prefill 2048 w4099 24/2": _point(88.6, 77.5),
        "ctx256K prefill 512 w2051 12/1": _point(61.0, 58.0, int8_dram=72.0),  # memory-bound through DRAM
        "ctx128K prefill 2048 w2051 24/2": _point(73.0, 70.0),  # neither bound: not counted
        "ctx32K prefill 512 w2051 24/2": _point(95.0, 90.0),  # below 128K: not counted
        "ctx128K decode 64x5 w4099 24/2": _point(99.0, 99.0),  # decode: not counted
    }
    assert grid_report.prefill_l2_ranges(profiled) == {"int8": "61-89%", "fp8": "58-78%"}
    del profiled["ctx256K prefill 512 w2051 12/1"]
    assert grid_report.prefill_l2_ranges(profiled) == {"int8": "84-89%", "fp8": "75-78%"}
    assert grid_report.prefill_l2_ranges({}) == {"int8": "(no profiled point)", "fp8": "(no profiled point)"}
