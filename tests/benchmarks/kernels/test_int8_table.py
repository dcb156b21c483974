"""The sm_90 int8 table picker: a width whose own best tile gains gets its own entry, noise does not,
and the table it writes is what the patched dispatch reads, first match winning."""

from __future__ import annotations

import json
import sys

from benchmarks.kernels import int8_table

A, B = (128, 32, 4), (64, 64, 2)
SOURCE = "x = 1\n_SM90_INT8_TABLE = (\n    (24, None, (128, 32, 4)),\n    (None, None, (64, 1, 2)),\n)\ny = 2\n"


def case(width: int, ms: dict, bp: int = 10) -> dict:
    candidates = [{"block_n": c[0], "target_splits": c[1], "num_warps": c[2], "num_stages": 2, "ms": t} for c, t in ms.items()]
    candidates.sort(key=lambda r: r["ms"])
    return {"shape": {"width": width}, "base_programs": bp, "candidates": candidates}


def sweep(b_at_2051: float) -> dict:
    """bp 10 at widths 1024 and 2051 (two contexts each): A is best at 1024, B at 2051 by 1 - b_at_2051."""
    cases = {}
    for ctx in ("4K", "32K"):
        cases[f"ctx{ctx} w1024"] = case(1024, {A: 1.00, B: 1.10})
        cases[f"ctx{ctx} w2051"] = case(2051, {A: 1.00, B: b_at_2051})
    return {"cases": cases}


def test_a_width_that_gains_gets_its_own_entry_and_the_bucket_ends_open():
    table, report = int8_table.pick(sweep(0.95), int8_table.read_table(SOURCE))
    assert table[24] == [(2048, A), (None, B)]  # 2048: the roundest limit between 1024 and 2051
    assert table[None] == [(None, (64, 1, 2))]  # no case there: kept
    entry = report["bp<=24 w<=None"]
    assert entry["after"] == list(B) and set(entry["cases"]) == {"ctx4K w2051", "ctx32K w2051"}
    assert entry["cases"]["ctx4K w2051"]["ms_before"] == 1.00 and entry["cases"]["ctx4K w2051"]["ms_after"] == 0.95


def test_a_gain_under_the_threshold_keeps_one_entry():
    """Control: 0.5% is the sweep's noise, not a reason to key on the width."""
    table, _ = int8_table.pick(sweep(0.995), int8_table.read_table(SOURCE))
    assert table[24] == [(None, A)]


def test_the_written_table_is_what_the_dispatch_reads(tmp_path, monkeypatch):
    sweep_file, qsa = tmp_path / "sweep.json", tmp_path / "qsa.py"
    sweep_file.write_text(json.dumps(sweep(0.95)))
    qsa.write_text(SOURCE)
    monkeypatch.setattr(sys, "argv", ["int8_table.py", "--sweep", str(sweep_file), "--qsa", str(qsa), "--out", str(tmp_path)])
    int8_table.main()
    text = qsa.read_text()
    assert text.startswith("x = 1\n") and text.endswith("y = 2\n")
    namespace: dict = {}
    exec(text, namespace)  # noqa: S102 - the file this test just wrote

    def select(bp: int, width: int):  # the patched _select_sm90_int8_config's rule
        return next(c for b, w, c in namespace["_SM90_INT8_TABLE"] if (b is None or bp <= b) and (w is None or width <= w))

    assert [select(10, w) for w in (1024, 2048, 2049, 2051, 8192)] == [A, A, B, B, B]
    assert select(25, 1024) == (64, 1, 2)
    report = json.loads((tmp_path / "qsa-int8-table.json").read_text())
    assert report["entries"].keys() == {"bp<=24 w<=2048", "bp<=24 w<=None"}
    assert report["table"]["kept"] is False and report["table"]["mean_slowdown_after"] == 1.0


def trade(a_at_32k: float) -> dict:
    """One bucket, one width: A is best at 4K context by 0.4%, B at 32K by a_at_32k - 1."""
    return {"cases": {"ctx4K w1024": case(1024, {A: 1.00, B: 1.004}), "ctx32K w1024": case(1024, {A: a_at_32k, B: 1.00})}}


def run_main(tmp_path, monkeypatch, sweep_data: dict) -> tuple[str, dict]:
    sweep_file, qsa = tmp_path / "sweep.json", tmp_path / "qsa.py"
    sweep_file.write_text(json.dumps(sweep_data))
    qsa.write_text(SOURCE)
    monkeypatch.setattr(sys, "argv", ["int8_table.py", "--sweep", str(sweep_file), "--qsa", str(qsa), "--out", str(tmp_path)])
    int8_table.main()
    return qsa.read_text(), json.loads((tmp_path / "qsa-int8-table.json").read_text())["table"]


def test_a_table_that_trades_one_context_for_another_on_noise_is_not_written(tmp_path, monkeypatch):
    """The picker prefers B (summed 2.004 against A's 2.006), but 0.1% per case is the sweep's noise:
    the file keeps A, byte for byte."""
    assert int8_table.pick(trade(1.006), int8_table.read_table(SOURCE))[0][24] == [(None, B)]
    text, summary = run_main(tmp_path, monkeypatch, trade(1.006))
    assert text == SOURCE and summary["kept"] is True
    assert abs(summary["mean_slowdown_before"] - 1.003) < 1e-9 and abs(summary["mean_slowdown_after"] - 1.002) < 1e-9


def test_a_table_that_gains_past_the_threshold_is_written(tmp_path, monkeypatch):
    """Control: with B 5% ahead at 32K the same rule rewrites the bucket."""
    text, summary = run_main(tmp_path, monkeypatch, trade(1.05))
    assert "(24, None, (64, 64, 2))" in text and summary["kept"] is False
