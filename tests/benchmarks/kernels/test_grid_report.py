"""The grid report's per-shape table and its comparison against an earlier grid, on an H200 grid (fixtures/)."""

from __future__ import annotations

import copy
import json

from pathlib import Path

from benchmarks.kernels import grid_report

GRID = json.loads((Path(__file__).parent / "fixtures/qsa-grid-h200.json").read_text())


def test_each_row_shape_counts_its_goal_and_each_context_its_in_scope_points():
    lines = grid_report.by_shape(GRID).splitlines()
    rows = {line[:14].strip(): line for line in lines[1:7]}
    assert list(rows) == ["decode 1x5", "decode 8x5", "decode 64x5", "decode 256x5", "prefill 512", "prefill 2048"]
    met = sum(int(line.split("goal met at ")[1].split(" of")[0]) for line in lines if "goal met at" in line)
    assert met == sum(p["goal_met"] and p["goal_in_scope"] for p in GRID["points"])


def test_a_grid_against_itself_is_1_and_a_slower_int8_shows():
    assert all(" 1.000 " in line for line in grid_report.against(GRID, GRID).splitlines()[1:])
    slower = copy.deepcopy(GRID)
    for p in slower["points"]:
        p["ms"]["int8"]["graph"] *= 1.1
    line = next(x for x in grid_report.against(slower, GRID).splitlines() if x.startswith("decode 64x5 24/2"))
    assert line.split()[3:5] == ["1.000", "1.100"]
