"""bench.md / bench.png / kv-pools.json / fidelity.json from H200 measure summaries, trimmed to what
the report reads, in fixtures/ (see its README): what the report does with each run and with a
sequence of them, and that the same runs always give the same report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.engine import report

FIXTURES = Path(__file__).parent / "fixtures"
EAGER_FIDELITY_ERRORS = FIXTURES / "eager-gates-fidelity-errors-bench.json"
EAGER_FIDELITY_FAILED = FIXTURES / "eager-gates-fidelity-failed-bench.json"
EAGER_FIDELITY = FIXTURES / "eager-fidelity.json"
GRAPHS_BF16_NOT_READY = FIXTURES / "graphs-bench-bf16-not-ready.json"

#: A sequence of runs, by name (the fixture's file stem: eager or CUDA graphs, the phases it
#: measured), oldest first.
EAGER_ALL_PHASES = "eager-gates-fidelity-bench"
GRAPHS_FIDELITY_BENCH = "graphs-fidelity-bench"
GRAPHS_GATES_BENCH = "graphs-gates-bench"  # gates one at a time, one picked cell
GRAPHS_GATES_FIDELITY = "graphs-gates-fidelity"  # the paired scale tail
GRAPHS_GATES_1 = "graphs-gates-1"  # json_mode answered 200, cut
GRAPHS_GATES_2 = "graphs-gates-2"  # the expectations allow a cut JSON prefix
GRAPHS_BENCH_1 = "graphs-bench-1"  # 128K x c16, int8 only (budget)
GRAPHS_BENCH_2 = "graphs-bench-2"  # the whole grid
GRAPHS_BENCH_3 = "graphs-bench-3"  # 128K x c16 on all three arms
REPORT_RUNS = (EAGER_ALL_PHASES, GRAPHS_FIDELITY_BENCH, GRAPHS_GATES_BENCH, GRAPHS_GATES_FIDELITY, GRAPHS_GATES_1,
               GRAPHS_GATES_2, GRAPHS_BENCH_1, GRAPHS_BENCH_2, GRAPHS_BENCH_3)
REPORT_FILES = ("bench.md", "bench.png", "kv-pools.json", "fidelity.json")


def runs_of(*names: str) -> tuple[tuple[str, Path], ...]:
    """(name, summary) of fixture runs, for report_of."""
    return tuple((name, FIXTURES / f"{name}.json") for name in names)


def test_one_run_gives_its_pools_gates_fidelity_and_bench(tmp_path):
    assert report.main(["--run", f"eager-run={EAGER_FIDELITY_ERRORS}", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "bench.md").read_text()
    assert report.LABEL in md  # never the real model's numbers
    assert md.startswith("# Engine bench, run eager-run: ")
    assert "| eager-run | eager | gates, fidelity, bench | 203 / 203 / 203 |" in md
    assert "## Gates (run eager-run)" in md and "## Bench, run eager-run, eager" in md
    assert "| int8 | 4,588,369 | 4,578,480 | 1.0022 |" in md
    assert "int8 / bf16 pool: 1.90x" in md
    # 8K x c16: 27.6 int8, 30.1 fp8, 18.6 bf16 decode tok/s, measured in the same cell.
    assert "| 8K | 16 | 482 / 476 / 631 | 27.6 / 30.1 / 18.6 | 0.92x | 1.48x | 0.00 |" in md
    assert "Skipped for the time budget: 32K x c16, 128K x c1" in md
    assert "| int8 | 3 | 97 |" in md and "no log-prob for 128" in md
    assert "CUDA graphs over eager" not in md  # no graphs run
    assert (tmp_path / "bench.png").stat().st_size > 10_000


def report_of(out, runs) -> str:
    """The report of (run name, summary) pairs, oldest first, written to out; its bench.md."""
    argv = ["--out", str(out)]
    for name, path in runs:
        argv += ["--run", f"{name}={path}"]
    assert report.main(argv) == 0
    return (out / "bench.md").read_text()


def test_eager_and_graphs_runs_each_give_what_they_measured(tmp_path):
    """Two eager runs and a CUDA-graphs one: gates and pools from the first eager run, fidelity from
    the second (the first one's comparison failed), both benches, and graphs over eager only where
    both modes measured the cell."""
    md = report_of(tmp_path, (("eager-gates", EAGER_FIDELITY_FAILED), ("eager-fidelity", EAGER_FIDELITY),
                              ("graphs-bench", GRAPHS_BF16_NOT_READY)))
    assert "## Gates (run eager-gates)" in md and "## Fidelity against bf16 KV (run eager-fidelity, eager)" in md
    assert "| int8 | 100 | 0 | 3.58e-06 |" in md and "| fp8 | 100 | 0 | 8.48e-06 |" in md
    assert "int8 serial 1 of 8, serial_salted 1 of 8" in md
    assert "| graphs-bench | CUDA graphs | bench | 280 / 282 / not ready |" in md
    assert "## Bench, run eager-gates, eager" in md and "## Bench, run graphs-bench, CUDA graphs" in md
    assert "## CUDA graphs over eager (decode tok/s, run graphs-bench over run eager-gates)" in md
    assert "| 8K | 1 | 9.13x | 8.12x | - |" in md  # 235.9 / 25.8 and 230.4 / 28.4
    assert "Not in this run's bench (server not ready): bf16." in md
    pools = json.loads((tmp_path / "kv-pools.json").read_text())
    assert pools["run"] == "run eager-gates (eager-gates-fidelity-failed-bench.json)" and pools["kv_bytes"] == 24 << 30
    assert pools["arms"]["int8"] == {"kv_cache_dtype": "int8_per_token_head", "measured_tokens": 4_588_369,
                                     "planned_tokens": 4_578_480}
    fidelity = json.loads((tmp_path / "fidelity.json").read_text())
    assert fidelity["run"] == "run eager-fidelity (eager-fidelity.json)" and fidelity["label"] == report.LABEL
    assert {a: (v["kv_cache_dtype"], v["prompts"]) for a, v in fidelity["arms"].items()} == {
        "int8": ("int8_per_token_head", 100), "fp8": ("fp8", 100), "bf16-repeat": ("auto", 100)}


def test_gates_and_pools_come_from_the_last_run_with_gates_and_fidelity_from_the_last_that_compared(tmp_path):
    """An eager run, a graphs run with fidelity and bench, and a graphs run with the gates one at a
    time and one picked cell: gates and pools from the last, fidelity from the second, every bench."""
    md = report_of(tmp_path, runs_of(*REPORT_RUNS[:3]))
    assert f"## Gates (run {GRAPHS_GATES_BENCH})" in md
    assert f"## Fidelity against bf16 KV (run {GRAPHS_FIDELITY_BENCH}, CUDA graphs)" in md
    assert "| api_surface | fail: 15/18 checks" in md
    assert "| int8 | 100 | 0 | 4.52e-06 |" in md and "| fp8 | 100 | 0 | 9.2e-06 |" in md
    assert "| int8 | 4,529,669 | 4,510,435 | 1.0043 |" in md
    assert "| 128K | 4 | 2793 / 3068 / 3286 |" in md


def test_a_later_paired_scale_run_gives_the_gates_pools_and_fidelity(tmp_path):
    """A graphs run with the paired scale tail (gates and fidelity) after those three: gates, pools
    and fidelity from it, the benches of the three before."""
    md = report_of(tmp_path, runs_of(*REPORT_RUNS[:4]))
    assert f"## Gates (run {GRAPHS_GATES_FIDELITY})" in md
    assert f"## Fidelity against bf16 KV (run {GRAPHS_GATES_FIDELITY}, CUDA graphs)" in md
    assert "| api_surface | fail: 17/18 checks, failed: json_mode |" in md
    assert "| int8 | 100 | 0 | 4.57e-06 |" in md and "| fp8 | 100 | 0 | 9.75e-06 |" in md
    assert "| int8 | 4,529,669 | 4,510,435 | 1.0043 |" in md  # the pairing moves no byte of the pool


def test_gates_pass_json_mode_once_the_expectations_allow_a_cut_prefix(tmp_path):
    """Two more gates runs: in the first json_mode answered 200 but cut (random weights never close
    the object), in the second the expectation file allows a cut JSON prefix. Gates from the second,
    fidelity still from the paired scale run."""
    runs = runs_of(*REPORT_RUNS[:6])
    md = report_of(tmp_path, runs)
    assert f"## Gates (run {GRAPHS_GATES_2})" in md
    assert f"## Fidelity against bf16 KV (run {GRAPHS_GATES_FIDELITY}, CUDA graphs)" in md
    assert "| api_surface | pass: 18/18 checks | pass: 18/18 checks | pass: 18/18 checks |" in md
    assert f"| {GRAPHS_GATES_2} | CUDA graphs | gates, determinism_probe | 152 / 163 / 167 |" in md  # Triton cache carried
    control = report_of(tmp_path / "c", runs[:-1])
    assert "| api_surface | fail: 17/18 checks, failed: json_mode |" in control


def test_the_report_of_a_sequence_of_runs_has_the_graph_grid_and_its_run_to_run_spread(tmp_path):
    """Three graphs runs more: one that ran out of budget after int8, the whole graphs grid in one run,
    and 128K x c16 on all three arms. The pool check comes from the last run with kv_pool gates and
    the fidelity check from the last that compared; the across-runs table puts each cell's ratio from
    the earlier graphs runs beside the grid run's."""
    md = report_of(tmp_path, runs_of(*REPORT_RUNS))
    assert "| 128K | 16 | 8904 / 12221 / 9930 | 29.5 / 22.6 / 28.9 | 1.31x | 1.02x | 0.00 |" in md
    int8_only = md.split(f"## Bench, run {GRAPHS_BENCH_1},")[1].split(f"## Bench, run {GRAPHS_BENCH_2},")[0]
    assert "Skipped for the time budget: 128K x c16 (fp8), 128K x c16 (bf16)." in int8_only
    assert "server not ready" not in int8_only  # skipped arms were ready: the budget, not the server, left them out
    assert f"| 32K | 1 | 1.01x ({GRAPHS_FIDELITY_BENCH}), 0.68x ({GRAPHS_BENCH_2}) |" in md
    assert "moves by up to " in md and "x between runs (median " in md
    assert not re.search(r"\bcalls?\b", md, re.IGNORECASE)  # runs go by the names they were given
    gates = json.loads((FIXTURES / f"{GRAPHS_GATES_2}.json").read_text())["gates"]
    pools = json.loads((tmp_path / "kv-pools.json").read_text())
    assert pools["run"] == f"run {GRAPHS_GATES_2} ({GRAPHS_GATES_2}.json)"
    assert {arm: (a["measured_tokens"], a["planned_tokens"]) for arm, a in pools["arms"].items()} == {
        arm: (g["kv_pool"]["observed"]["kv_pool_tokens"], g["kv_pool"]["observed"]["plan"]["planned_tokens"])
        for arm, g in gates.items()}
    compare = json.loads((FIXTURES / f"{GRAPHS_GATES_FIDELITY}.json").read_text())["fidelity"]["compare"]
    fidelity = json.loads((tmp_path / "fidelity.json").read_text())
    assert fidelity["run"] == f"run {GRAPHS_GATES_FIDELITY} ({GRAPHS_GATES_FIDELITY}.json)"
    assert {arm: a["mean_kl"] for arm, a in fidelity["arms"].items()} == {arm: compare[arm]["mean_kl"] for arm in fidelity["arms"]}
    alone = report_of(tmp_path / "c", runs_of(GRAPHS_BENCH_2))
    assert "across CUDA-graph runs" not in alone  # one run: nothing to compare it with


def test_the_same_runs_give_the_same_report_byte_for_byte(tmp_path):
    """What makes a committed report reproducible from its runs: two reports of the same summaries
    are the same bytes, chart included."""
    report_of(tmp_path / "a", runs_of(*REPORT_RUNS))
    report_of(tmp_path / "b", runs_of(*REPORT_RUNS))
    for name in REPORT_FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # Control: one run fewer is another report.
    report_of(tmp_path / "c", runs_of(*REPORT_RUNS[:-1]))
    assert (tmp_path / "c" / "bench.md").read_bytes() != (tmp_path / "a" / "bench.md").read_bytes()


def test_a_runs_repeats_get_their_own_tables_and_count_as_samples_of_the_spread(tmp_path):
    """`measure --bench-repeats 2`: the 128K x c16 run's cells again as repeat 1 (int8 10% slower
    there). The run's section shows both passes; the across-runs table takes each pass as its own
    sample, so one run with repeats is enough to show a spread."""
    summary = json.loads((FIXTURES / f"{GRAPHS_BENCH_3}.json").read_text())
    again = []
    for c in summary["bench"]["cells"]:
        c2 = dict(c, repeat=1)
        if c["arm"] == "int8":
            c2["mean_decode_tok_s"] = c["mean_decode_tok_s"] * 0.9
        again.append(c2)
    summary["bench"]["cells"] += again
    summary["bench"]["skipped"] = [{"arm": "bf16", "input_len": 131072, "concurrency": 16, "repeat": 2, "reason": "time budget"}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(summary))
    md = report_of(tmp_path / "o", (("repeated", path),))
    assert "Repeat 0 (arm order shifted by 0):" in md and "Repeat 1 (arm order shifted by 1):" in md
    assert "| 128K | 16 | 8904 / 12221 / 9930 | 29.5 / 22.6 / 28.9 | 1.31x |" in md
    assert md.split("Repeat 1 (arm order")[1].count("| 26.6 / 22.6 / 28.9 | 1.18x |") == 1
    assert "| 128K | 16 | 1.31x (repeated), 1.18x (repeated r1) |" in md
    assert "Skipped for the time budget: 128K x c16 (bf16, repeat 2)." in md
    single = report_of(tmp_path / "p", runs_of(GRAPHS_BENCH_3))
    assert "Repeat 0" not in single and "across CUDA-graph runs" not in single


def test_failed_cells_and_missing_phases_are_said_not_hidden(tmp_path):
    summary = json.loads(EAGER_FIDELITY_ERRORS.read_text())
    summary["fidelity"] = {"error": "RuntimeError: the bf16 KV server is not ready"}
    for c in summary["bench"]["cells"]:
        c.update(error="ReadError: ", completed=0)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(summary))
    report.main(["--run", f"failed={path}", "--out", str(tmp_path / "o")])
    md = (tmp_path / "o" / "bench.md").read_text()
    assert "Not measured: RuntimeError: the bf16 KV server is not ready" in md
    assert "15 cells failed" in md
    assert not (tmp_path / "o" / "bench.png").exists()  # no completed cell, no plot
    assert not (tmp_path / "o" / "fidelity.json").exists()  # nothing compared, no fidelity check
    del summary["gates"]
    path.write_text(json.dumps(summary))
    report.main(["--run", f"no-gates={path}", "--out", str(tmp_path / "p")])
    assert not (tmp_path / "p" / "kv-pools.json").exists()  # no kv_pool gate, no pool check
    assert "No run measured the gates." in (tmp_path / "p" / "bench.md").read_text()


def test_a_run_argument_without_its_name_is_refused_with_the_form(tmp_path, capsys):
    with pytest.raises(SystemExit):
        report.main(["--run", str(EAGER_FIDELITY_ERRORS), "--out", str(tmp_path)])
    assert "give NAME=SUMMARY" in capsys.readouterr().err
