"""bench.md / bench.png from a real measure summary (call 25 on the H200) and from runs that measured less."""

from __future__ import annotations

import json

from benchmarks.engine import report
from builder.constants import REPO_ROOT

CALL25 = REPO_ROOT / "evidence/engine-h200/runs/call25-summary.json"


def test_the_call25_tables_carry_every_arm_and_the_ratios_of_one_run(tmp_path):
    assert report.main(["--summary", str(CALL25), "--out", str(tmp_path), "--call", "25"]) == 0
    md = (tmp_path / "bench.md").read_text()
    assert report.LABEL in md  # never the real model's numbers
    assert "| int8 | 203 | 4,588,369 | 4,578,480 | 1.0022 |" in md
    assert "int8 / bf16 pool: 1.90x" in md
    # 8K x c16: 27.6 int8, 30.1 fp8, 18.6 bf16 decode tok/s, measured in the same cell.
    assert "| 8K | 16 | 482 / 476 / 631 | 27.6 / 30.1 / 18.6 | 0.92x | 1.48x | 0.00 |" in md
    assert "Skipped for the device budget: 32K x c16, 128K x c1" in md
    assert "| int8 | 3 | 97 |" in md and "no log-prob for 128" in md
    assert (tmp_path / "bench.png").stat().st_size > 10_000
    pools = json.loads((tmp_path / "kv-pools.json").read_text())
    assert pools["kv_bytes"] == 24 << 30 and pools["label"] == report.LABEL
    assert pools["arms"]["int8"] == {"kv_cache_dtype": "int8_per_token_head", "measured_tokens": 4_588_369,
                                     "planned_tokens": 4_578_480}
    # the committed file is this run's
    assert pools == json.loads((REPO_ROOT / "evidence/engine-h200/kv-pools.json").read_text()) | {"run": pools["run"]}


def test_failed_cells_and_missing_phases_are_said_not_hidden(tmp_path):
    summary = json.loads(CALL25.read_text())
    summary["fidelity"] = {"error": "RuntimeError: the bf16 KV server is not ready"}
    for c in summary["bench"]["cells"]:
        c.update(error="ReadError: ", completed=0)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(summary))
    report.main(["--summary", str(path), "--out", str(tmp_path / "o")])
    md = (tmp_path / "o" / "bench.md").read_text()
    assert "Not measured: RuntimeError: the bf16 KV server is not ready" in md
    assert "15 cells failed" in md
    assert not (tmp_path / "o" / "bench.png").exists()  # no completed cell, no plot
    del summary["gates"]
    path.write_text(json.dumps(summary))
    report.main(["--summary", str(path), "--out", str(tmp_path / "p")])
    assert not (tmp_path / "p" / "kv-pools.json").exists()  # no kv_pool gate, no pool check
