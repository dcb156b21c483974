"""engine-ab.json, ab.md and ab.png from engine A/B summaries: small synthetic summaries whose arms have
known per-repeat numbers, so each median, ratio, verdict, breakdown and agreement has a value to be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.engine import ab
from benchmarks.engine import ab_report as rep
from benchmarks.engine import breakdown as bd
from builder.bundle.engine_evidence import EngineAB

#: Few resamples: the tests need the intervals' behaviour, not their last digit.
FAST = 400
CELL = (8192, 1)
H100 = {"name": "NVIDIA H100 80GB HBM3", "driver_version": "550.54.15", "clocks.max.sm": "1980 MHz"}


def result(arm: str, tpot: float, *, repeat: int, cell=CELL, itl: float | None = None, ttft: float = 100.0,
           throttled: bool = False, load: float = 0.5, **extra) -> dict:
    """One repeat as run_arm records it; throughput follows TPOT, so the faster arm has more of it."""
    n, c = cell
    out = {"workload": ab.cell_name(n, c), "completed": max(c, 2), "failed": 0, "median_ttft_ms": ttft,
           "median_tpot_ms": tpot, "median_itl_ms": tpot if itl is None else itl, "p99_itl_ms": tpot * 1.5,
           "output_throughput": 1000.0 / tpot * c, "arm": arm, "input_len": n, "concurrency": c, "repeat": repeat,
           "telemetry": {"wall_s": 1.0, "gpu": {"sm_mhz_median": 1980.0, "throttled": throttled},
                         "host": {"loadavg_1m": load, "cpu_busy": 0.1, "server_cpu_s": 0.5}}}
    out.update(extra)
    return out


def profile(*, decode_tokens: int = 100, mixed_tokens: int = 0, decode: dict | None = None,
            mixed: dict | None = None) -> dict:
    """A profiled pass as ab.profile_pass records it (breakdown.summarize plus its own keys)."""
    def step(s: dict | None) -> dict:
        if s is None:
            return {"error": "no step of the kind asked for: 0 step annotations"}
        return {"steps": 20, "gen_requests": 1, "step_us": s["step_us"], "step_us_median": s.get("step_us_median", s["step_us"]),
                "gpu_busy_us": s["step_us"] - s["families"].get(bd.IDLE_ROW, 0.0),
                "idle_us": s["families"].get(bd.IDLE_ROW, 0.0), "overlap_us": 0.0, "kernels": {}, "categories": {},
                "idle_after": s.get("idle_after", {}), "families": s["families"],
                **{k: s[k] for k in ("host_step_us", "host_before", "host_sequence", "host_sequence_share") if k in s}}

    return {"trace": "t.pt.trace.json.gz", "tokens": {"steps": {}, "tokens": {"decode": decode_tokens, "mixed": mixed_tokens},
                                                      "median_period_us": None},
            "decode": step(decode), "mixed": step(mixed), "trace_bytes": 1000, "trace_kept": True,
            "activities": ["CUDA"], "profiled_median_tpot_ms": 1.0}


def summary(tpots: dict[str, list[float]], *, cells=(CELL,), results: list[dict] | None = None,
            profiles: dict[str, dict] | None = None, arms: dict[str, dict] | None = None, gpus=(H100,)) -> dict:
    """An A/B summary: each arm's TPOT per repeat in every cell (unless `results` gives them), then
    `arms` merged over each arm's record."""
    order = list(tpots)
    if results is None:
        results = [result(arm, t, repeat=i, cell=cell) for cell in cells for arm in order
                   for i, t in enumerate(tpots[arm])]
    records = {arm: {"position": i, "state": "ready", "argv": [], "env": {}, "ready_s": 40.0, "measure_s": 100.0,
                     "repeats_done": len(tpots[arm]), "profiles": (profiles or {}).get(arm, {}), "skipped": []}
               for i, arm in enumerate(order)}
    for arm, extra in (arms or {}).items():
        records.setdefault(arm, {}).update(extra)
    return {"started_at": "2026-12-05T11:29:18Z", "host": {"cpus": 16, "kernel": "6.8", "gpus": list(gpus)},
            "ab": {"order": order, "mtp_k": 0, "repeats": max(map(len, tpots.values())), "cells": [list(c) for c in cells],
                   "profile": profiles is not None, "arms": records, "results": results}}


def run_of(s: dict, name: str = "r1") -> rep.Run:
    return rep.check(rep.Run(name=name, file=f"{name}.json", summary=s))


def report(*summaries: dict) -> EngineAB:
    return rep.engine_ab([run_of(s, f"r{i + 1}") for i, s in enumerate(summaries)], resamples=FAST)


def only_cell(got: EngineAB):
    assert len(got.cells) == 1
    return got.cells[0]


FAST_TPOTS = [2.0, 2.05, 2.1, 2.02, 2.08]
SLOW_TPOTS = [3.0, 3.05, 3.1, 3.02, 3.08]


# --- medians


def test_a_median_is_over_the_completed_repeats_only_with_an_interval_around_it():
    tpots = [2.0, 2.1, 2.2, 2.3, 2.4]
    results = [result("int8", t, repeat=i) for i, t in enumerate(tpots)]
    results += [result("int8", 99.0, repeat=5, error="ReadError: "),  # errored
                result("int8", 99.0, repeat=6, completed=0),  # nothing completed
                result("int8", 99.0, repeat=7, failed=1)]  # a request failed
    got = only_cell(report(summary({"int8": tpots}, results=results)))
    est = got.medians["int8"]["median_tpot_ms"]
    assert est.value == pytest.approx(2.2) and est.n == 5
    assert est.low <= est.value <= est.high and est.high < 99 and est.low >= 2.0
    assert got.medians["int8"]["output_throughput"].value == pytest.approx(1000 / 2.2)
    assert set(got.medians["int8"]) == set(rep.AB_METRICS)


def test_intervals_are_seeded_so_a_rebuild_gives_the_same_numbers():
    """Few resamples over many distinct repeats, where an unseeded bootstrap would move the bounds."""
    s = summary({"int8": [2.0 + 0.01 * i for i in range(15)], "fp8": [3.0 + 0.013 * i for i in range(15)]})
    def build(name: str) -> str:
        return rep.engine_ab([run_of(s, name)], resamples=30).model_dump_json()

    assert build("r1") == build("r1")
    assert build("r1").replace("run r1 (r1.json)", "") != build("r2").replace("run r2 (r2.json)", "")  # control


def test_a_repeat_not_counted_is_listed_with_its_reason():
    results = [result("int8", 2.0, repeat=0), result("int8", 9.0, repeat=1, error="ReadError: peer closed"),
               result("int8", 9.0, repeat=2, failed=2, completed=0)]
    s = summary({"int8": [2.0]}, results=results, arms={"int8": {"skipped": [
        {"cell": "in8192-c1", "repeat": 3, "reason": "time budget"}, {"sweep_rate": 2.0, "reason": "time budget"}]}})
    md = rep.markdown([run_of(s)], report(s))
    assert "int8 in8192-c1 repeat 1: not counted (ReadError: peer closed)" in md
    assert "int8 in8192-c1 repeat 2: not counted (2 requests failed, 0 completed)" in md
    assert "int8 in8192-c1 repeat 3: skipped (time budget)" in md
    assert "int8 sweep_rate 2.0: skipped (time budget)" in md


def test_throttled_repeats_and_the_hosts_load_are_counted_per_arm():
    results = [result("int8", 2.0, repeat=0, throttled=True, load=1.0), result("int8", 2.0, repeat=1, load=3.0),
               result("int8", 2.0, repeat=2, throttled=True, load=2.0)]
    s = summary({"int8": [2.0] * 3}, results=results)
    md = rep.markdown([run_of(s)], report(s))
    assert "| int8 | 3 | 2 | 2.00 | 100 [100, 100] | 2 [2, 2] |" in md
    for r in results:  # no nvidia-smi samples: throttling unknown, not "0"
        r["telemetry"]["gpu"] = None
    md = rep.markdown([run_of(s)], report(s))
    assert "| int8 | 3 | - | 2.00 | 100 [100, 100] |" in md


# --- ratios and verdicts


def test_a_clearly_faster_int8_is_faster_on_tpot_and_throughput():
    got = only_cell(report(summary({"int8": FAST_TPOTS, "fp8": SLOW_TPOTS})))
    tpot = got.ratios["int8/fp8"]["median_tpot_ms"]
    assert tpot.value < 1 and tpot.high < 1 and tpot.verdict == "faster" and tpot.n == 5
    assert tpot.value == pytest.approx(2.05 / 3.05)
    thr = got.ratios["int8/fp8"]["output_throughput"]  # higher is better: a ratio above 1 is faster
    assert thr.value > 1 and thr.low > 1 and thr.verdict == "faster"
    assert got.ratios["int8/fp8"]["median_ttft_ms"].verdict == "no difference measured"  # TTFT the same
    assert "int8/bf16" not in got.ratios  # no bf16 arm: no ratio to it


def test_swapping_the_arms_flips_the_verdict():
    got = only_cell(report(summary({"int8": SLOW_TPOTS, "fp8": FAST_TPOTS})))
    assert got.ratios["int8/fp8"]["median_tpot_ms"].verdict == "slower"
    assert got.ratios["int8/fp8"]["median_tpot_ms"].low > 1
    assert got.ratios["int8/fp8"]["output_throughput"].verdict == "slower"


def test_identical_arms_measure_no_difference():
    s = summary({"int8": FAST_TPOTS, "fp8": FAST_TPOTS[::-1], "bf16": SLOW_TPOTS})
    got = report(s)
    ratio = only_cell(got).ratios["int8/fp8"]["median_tpot_ms"]
    assert ratio.value == pytest.approx(1.0) and ratio.low <= 1 <= ratio.high
    assert ratio.verdict == "no difference measured"
    assert only_cell(got).ratios["int8/bf16"]["median_tpot_ms"].verdict == "faster"
    md = rep.markdown([run_of(s)], got)
    assert "| 8K x c1 | int8/fp8 | 1.000 [" in md and "no difference measured" in md


def test_each_variant_arm_is_compared_with_its_base():
    got = only_cell(report(summary({"int8": SLOW_TPOTS, "int8-pinned": FAST_TPOTS, "fp8": SLOW_TPOTS})))
    assert list(got.ratios) == ["int8/fp8", "int8-pinned/int8"]
    assert got.ratios["int8-pinned/int8"]["median_tpot_ms"].verdict == "faster"


def test_a_variant_of_a_variant_is_compared_with_the_nearest_base_served():
    assert rep.ratio_pairs(["int8", "int8-pinned", "int8-pinned-cold"]) == [
        ("int8-pinned", "int8"), ("int8-pinned-cold", "int8-pinned")]
    assert rep.ratio_pairs(["fp8", "int8", "int8-pinned-cold"]) == [("int8", "fp8"), ("int8-pinned-cold", "int8")]
    assert rep.ratio_pairs(["fp8-pinned", "int8-cold"]) == []  # no base served: nothing to compare with


def test_a_cold_arms_first_pass_is_reported_apart_and_left_out_of_its_median():
    """int8-cold's repeat 0 of the first cell found the page cache cold (TTFT 900 ms); its median is over
    the warm repeats, and the cold-start table puts the first pass beside them. Control: the same
    repeat 0 on a warm arm is pooled."""
    cells = ((32768, 1), (8192, 1))
    results = [result("int8-cold", 2.0, repeat=i, cell=cell, ttft=900.0 if (i, cell) == (0, (32768, 1)) else 100.0)
               for cell in cells for i in range(4)]
    results += [result("int8", 2.0, repeat=i, cell=cell, ttft=900.0 if (i, cell) == (0, (32768, 1)) else 100.0)
                for cell in cells for i in range(4)]
    s = summary({"int8-cold": [2.0] * 4, "int8": [2.0] * 4}, cells=cells, results=results)
    got = report(s)
    first = got.cells[0]
    assert (first.input_len, first.concurrency) == (32768, 1)
    assert first.medians["int8-cold"]["median_ttft_ms"].n == 3 and first.medians["int8-cold"]["median_ttft_ms"].value == 100.0
    assert first.medians["int8"]["median_ttft_ms"].n == 4  # a warm arm's repeat 0 is a repeat like the others
    assert got.cells[1].medians["int8-cold"]["median_ttft_ms"].n == 4  # later cells were not cold
    md = rep.markdown([run_of(s)], got)
    assert "| int8-cold | 32K x c1 | 3 | 900 | 100 | 9.00x | 2 | 2 | 1.00x |" in md
    assert "int8 | 32K x c1 | 3 |" not in md.split("## Cold start")[1]


def test_the_request_rate_sweep_is_tabled_per_arm_and_rate_with_its_limits():
    s = summary({"int8": FAST_TPOTS})
    s["ab"]["sweep"] = {"rates": [0.5, 2.0], "input_len": 32768, "requests": 16, "seed": 0,
                        "slo": {"ttft_ms": 1000.0, "tpot_ms": 20.0}}
    s["ab"]["sweep_results"] = [
        {"arm": "int8", "sweep_rate": 0.5, "completed": 16, "num_prompts": 16, "goodput": 0.49, "request_throughput": 0.49,
         "median_ttft_ms": 210.0, "p99_ttft_ms": 260.0, "median_tpot_ms": 4.1, "output_throughput": 62.0},
        {"arm": "int8", "sweep_rate": 2.0, "error": "ReadTimeout: the server stopped answering"}]
    md = rep.markdown([run_of(s)], report(s))
    assert "TTFT <= 1000 ms and TPOT <= 20 ms" in md
    assert "| int8 | 0.5 | 16/16 | 0.49 | 0.49 | 210 | 260 | 4.1 | 62 |" in md
    assert "| int8 | 2 | failed: ReadTimeout: the server stopped answering |" in md
    del s["ab"]["sweep"]
    assert "Request-rate sweep" not in rep.markdown([run_of(s)], report(s))


# --- the breakdown


def test_the_breakdown_takes_the_step_kind_that_delivered_more_tokens():
    decode = {"step_us": 900.0, "families": {"MoE / MLP": 500.0, bd.IDLE_ROW: 400.0}}
    mixed = {"step_us": 2200.0, "families": {"QSA attention": 1500.0, "MoE / MLP": 600.0, bd.IDLE_ROW: 100.0},
             "idle_after": {"memcpy DtoH": 80.0, "QSA attention": 20.0}}
    s = summary({"int8": [2.4, 2.4, 2.4]}, profiles={"int8": {"in8192-c1": profile(
        decode_tokens=100, mixed_tokens=900, decode=decode, mixed=mixed)}})
    (b,) = report(s).breakdown
    assert (b.arm, b.input_len, b.concurrency, b.step_kind) == ("int8", 8192, 1, "mixed")
    # The host's row is what the measured ITL (2.4 ms) leaves beside the GPU's 2100 us, not the profiled idle.
    assert b.step_us == 2200.0 and b.families == {**mixed["families"], bd.IDLE_ROW: pytest.approx(300.0)}
    assert b.gpu_busy_us == 2100.0 and b.idle_after == mixed["idle_after"] and b.bound == "QSA attention"
    assert b.measured_itl_ms == 2.4 and b.accounting_gap == pytest.approx(0.2 / 2.4)
    # Control: the same pass with most tokens from decode steps describes those.
    s["ab"]["arms"]["int8"]["profiles"]["in8192-c1"]["tokens"]["tokens"] = {"decode": 900, "mixed": 100}
    (b,) = report(s).breakdown
    assert b.step_kind == "decode" and b.step_us == 900.0 and b.families[bd.IDLE_ROW] == pytest.approx(1900.0)
    assert b.bound == bd.IDLE_ROW


def test_a_kind_without_a_breakdown_falls_back_to_the_other_and_none_is_listed():
    decode = {"step_us": 1000.0, "families": {"MoE / MLP": 700.0, bd.IDLE_ROW: 300.0}}
    s = summary({"int8": [1.0], "fp8": [1.0]}, profiles={
        "int8": {"in8192-c1": profile(decode_tokens=10, mixed_tokens=500, decode=decode, mixed=None)},
        "fp8": {"in8192-c1": {"error": "time budget"}}})
    got = report(s)
    assert [(b.arm, b.step_kind) for b in got.breakdown] == [("int8", "decode")]
    md = rep.markdown([run_of(s)], got)
    assert "fp8 in8192-c1: profile without a breakdown (time budget)" in md


def test_a_step_that_waits_on_the_host_is_bound_by_it_and_a_large_gap_is_marked():
    # 700 us of GPU work in a step the repeats measured at 2.0 ms: the host's 1300 us bound it. The profiled
    # median step (1000 us) is far from that ITL: marked.
    decode = {"step_us": 1600.0, "step_us_median": 1000.0,
              "families": {"QSA attention": 300.0, "MoE / MLP": 400.0, bd.IDLE_ROW: 900.0},
              "idle_after": {"memcpy DtoH": 800.0, "MoE / MLP": 100.0},
              "host_step_us": 1950.0, "host_before": {"graph": 1200.0, "QSA attention": 50.0}}
    s = summary({"int8": [2.0, 2.0]}, profiles={"int8": {"in8192-c1": profile(decode=decode)}})
    got = report(s)
    (b,) = got.breakdown
    assert b.bound == bd.IDLE_ROW and b.families[bd.IDLE_ROW] == pytest.approx(1300.0)
    assert b.accounting_gap == pytest.approx(0.5) and b.accounting_gap > bd.ACCOUNTING_LIMIT
    assert (b.step_us, b.step_us_median, b.host_step_us) == (1600.0, 1000.0, 1950.0)
    md = rep.markdown([run_of(s)], got)
    row = next(line for line in md.splitlines() if line.startswith("| int8 | 8K x c1 | decode |"))
    assert row == ("| int8 | 8K x c1 | decode | 300 | 400 | 1300 | 700 | 1950 | graph (1200) | memcpy DtoH (800) | "
                   "host | 1000 | 2.000 | 50.0% (!) |")
    # Control: a profile that matches the repeats carries no mark.
    s["ab"]["arms"]["int8"]["profiles"]["in8192-c1"] = profile(decode={**decode, "step_us_median": 1960.0})
    got = report(s)
    assert got.breakdown[0].accounting_gap == pytest.approx(0.02)
    assert "(!)" not in rep.markdown([run_of(s)], got)


def test_arms_whose_steps_make_the_same_cuda_calls_are_named_together_and_one_more_launch_parts_them():
    calls = ["cudaLaunchKernel > _prepare_pos_seq_lens_kernel", "cudaGraphLaunch"]
    def decode(sequence: list[str]) -> dict:
        return {"step_us": 1000.0, "families": {"MoE / MLP": 700.0, bd.IDLE_ROW: 300.0},
                "host_sequence": sequence, "host_sequence_share": 0.8}
    s = summary({"int8": [1.0], "fp8": [1.0], "bf16": [1.0]}, profiles={
        "int8": {"in8192-c1": profile(decode=decode(calls))}, "fp8": {"in8192-c1": profile(decode=decode(calls))},
        "bf16": {"in8192-c1": profile(decode=decode([*calls, "cudaLaunchKernel > extra"]))}})
    got = report(s)
    assert [(b.arm, b.host_calls) for b in got.breakdown] == [("int8", 2), ("fp8", 2), ("bf16", 3)]
    md = rep.markdown([run_of(s)], got)
    assert "| int8 | 8K x c1 | decode | 2 | 80% | fp8 |" in md
    assert "| fp8 | 8K x c1 | decode | 2 | 80% | int8 |" in md
    assert "| bf16 | 8K x c1 | decode | 3 | 80% | - |" in md
    # The same calls in another order are other host work.
    s["ab"]["arms"]["fp8"]["profiles"]["in8192-c1"] = profile(decode=decode(calls[::-1]))
    assert "| int8 | 8K x c1 | decode | 2 | 80% | - |" in rep.markdown([run_of(s)], report(s))


def test_arms_that_answered_with_the_same_texts_are_named_together_and_one_changed_token_parts_them():
    texts = {"int8": ["aa", "bb"], "int8-prefetch1": ["aa", "bb"], "fp8": ["aa", "bc"]}
    results = [result(arm, 2.0, repeat=i, output_sha256=list(t)) for arm, t in texts.items() for i in range(3)]
    # int8's last repeat moved a token: its repeats are not all alike, its first still matches its twin's.
    results[2]["output_sha256"] = ["aa", "bd"]
    s = summary({arm: [2.0] * 3 for arm in texts}, results=results)
    md = rep.markdown([run_of(s)], report(s))
    assert "| int8 | 8K x c1 | 2/3 | int8-prefetch1 |" in md
    assert "| int8-prefetch1 | 8K x c1 | 3/3 | int8 |" in md
    assert "| fp8 | 8K x c1 | 3/3 | - |" in md
    # A run that kept no digests (or lost one of a repeat's requests) gets no such table.
    for r in results:
        r["output_sha256"] = r["output_sha256"][:1]
    assert "The same outputs" not in rep.markdown([run_of(s)], report(s))


def test_a_profile_recorded_with_cpu_activity_gives_no_row_and_says_why():
    decode = {"step_us": 1000.0, "families": {"MoE / MLP": 700.0, bd.IDLE_ROW: 300.0}}
    cpu = {**profile(decode=decode), "activities": ["CPU", "CUDA"]}
    old = {k: v for k, v in profile(decode=decode).items() if k != "activities"}  # summaries before it was named
    s = summary({"int8": [1.0], "fp8": [1.0], "bf16": [1.0]}, profiles={
        "int8": {"in8192-c1": cpu}, "fp8": {"in8192-c1": old}, "bf16": {"in8192-c1": profile(decode=decode)}})
    got = report(s)
    assert [b.arm for b in got.breakdown] == ["bf16"]
    md = rep.markdown([run_of(s)], got)
    for arm in ("int8", "fp8"):
        assert f"{arm} in8192-c1: profile without a breakdown (recorded with CPU activity" in md


# --- a second run


def test_a_second_run_agrees_where_tpot_moved_little_and_differs_where_it_moved_more():
    cells = ((8192, 1), (32768, 4))
    first = summary({"int8": [2.0, 2.0, 2.0], "fp8": [3.0, 3.0, 3.0]}, cells=cells)
    moved = {("int8", 8192): 1.08, ("int8", 32768): 1.02, ("fp8", 8192): 1.0}  # fp8 32K x c4 not measured again
    results = [result(r["arm"], r["median_tpot_ms"] * moved[(r["arm"], r["input_len"])], repeat=r["repeat"],
                      cell=(r["input_len"], r["concurrency"]))
               for r in first["ab"]["results"] if (r["arm"], r["input_len"]) in moved]
    second = summary({"int8": [2.0] * 3, "fp8": [3.0] * 3}, cells=cells, results=results)
    got = report(first, second)
    assert got.agreement == pytest.approx({"int8 8192x1": 0.08, "int8 32768x4": 0.02, "fp8 8192x1": 0.0})
    md = rep.markdown([run_of(first, "r1"), run_of(second, "r2")], got)
    assert "| int8 | 8K x c1 | 2.000 | 2.160 | 8.0% | differs |" in md
    assert "| int8 | 32K x c4 | 2.000 | 2.040 | 2.0% | agrees |" in md
    assert "Measured in one run only: fp8 32K x c4." in md
    assert got.agreement_run == "run r2 (r2.json)"
    assert report(first).agreement == {} and report(first).agreement_run is None  # one run: nothing to agree with


# --- the files


def write_summary(path: Path, s: dict) -> str:
    path.write_text(json.dumps(s))
    return str(path)


def test_the_cli_writes_the_three_files_and_a_rebuild_is_byte_identical(tmp_path, capsys):
    decode = {"step_us": 1000.0, "families": {"MoE / MLP": 700.0, bd.IDLE_ROW: 300.0}, "idle_after": {"start": 300.0}}
    profiles = {arm: {"in8192-c1": profile(decode=decode)} for arm in ("int8", "fp8", "int8-pinned")}
    first = write_summary(tmp_path / "a.json", summary(
        {"int8": FAST_TPOTS, "fp8": SLOW_TPOTS, "int8-pinned": FAST_TPOTS}, profiles=profiles))
    second = write_summary(tmp_path / "b.json", summary({"int8": FAST_TPOTS, "fp8": SLOW_TPOTS}))
    argv = ["--run", f"ab-1={first}", "--run", f"ab-2={second}"]
    assert rep.main([*argv, "--out", str(tmp_path / "o1")]) == 0
    assert rep.main([*argv, "--out", str(tmp_path / "o2")]) == 0
    assert sorted(p.name for p in (tmp_path / "o1").iterdir()) == ["ab.md", "ab.png", "engine-ab.json"]
    for name in ("ab.md", "ab.png", "engine-ab.json"):
        assert (tmp_path / "o1" / name).read_bytes() == (tmp_path / "o2" / name).read_bytes(), name
    got = EngineAB.model_validate_json((tmp_path / "o1" / "engine-ab.json").read_text())
    assert got.run == "run ab-1 (a.json)" and got.order == ["int8", "fp8", "int8-pinned"] and got.mtp_k == 0
    assert got.label == "engine on an NVIDIA H100 80GB HBM3, small Qwen4Exp with random weights (not the real model)"
    assert got.hardware == "NVIDIA H100 80GB HBM3, driver 550.54.15, 16 CPUs"
    assert set(got.agreement) == {"int8 8192x1", "fp8 8192x1"} and len(got.breakdown) == 3
    assert (tmp_path / "o1" / "ab.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "o1" / "ab.md").read_text()
    assert md.startswith(f"# Engine A/B, run ab-1: {got.label}")
    assert "started 2026-12-05 11:29 UTC" in md and "- MTP k: 0" in md and "int8, fp8, int8-pinned" in md
    # Control: another first run is another report.
    assert rep.main(["--run", f"ab-2={second}", "--out", str(tmp_path / "o3")]) == 0
    assert (tmp_path / "o3" / "engine-ab.json").read_bytes() != (tmp_path / "o1" / "engine-ab.json").read_bytes()
    assert not (tmp_path / "o3" / "ab.png").exists()  # no profile, no chart
    assert not [p for p in (tmp_path / "o1").iterdir() if p.name.startswith(".")]  # no work folder left behind


def test_failed_arms_are_listed_not_hidden(tmp_path):
    s = summary({"int8": FAST_TPOTS, "fp8": []}, arms={
        "fp8": {"state": "timeout", "error": "RuntimeError: server did not start\n  frame", "repeats_done": 0},
        "bf16": {"position": 2}})
    s["ab"]["order"].append("bf16")
    got = report(s)
    md = rep.markdown([run_of(s)], got)
    assert "- fp8: failed: `RuntimeError: server did not start`" in md and "- fp8: server timeout" in md
    assert "| fp8 | 0 | - | - | no completed repeat |" in md
    assert list(only_cell(got).medians) == ["int8"] and only_cell(got).ratios == {}


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: write_summary(p, {"started_at": "x", "bench": {}}), "run bad (s.json): no 'ab' in the summary"),
    (lambda p: write_summary(p, summary({"int8": [2.0]}, results=[result("int8", 2.0, repeat=0, error="boom")])),
     "run bad (s.json): no completed repeat"),
    (lambda p: write_summary(p, {"ab": []}), "its 'ab' is not an A/B record"),
    (lambda p: (p.write_text("{cut"), str(p))[1], "cannot read it (JSONDecodeError"),
    (lambda p: str(p.with_name("absent.json")), "cannot read it (FileNotFoundError"),
])
def test_a_run_without_an_ab_is_refused_naming_it_and_nothing_is_written(tmp_path, capsys, make, message):
    good = write_summary(tmp_path / "good.json", summary({"int8": FAST_TPOTS}))
    bad = make(tmp_path / "s.json")
    for argv in (["--run", f"bad={bad}"], ["--run", f"good={good}", "--run", f"bad={bad}"]):
        assert rep.main([*argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert message in err and "summary.json" in err, err  # the run, its file, and what to give instead
        assert not (tmp_path / "o").exists()


def test_a_bad_run_value_is_refused_and_an_earlier_report_stays(tmp_path, capsys):
    out = tmp_path / "o"
    good = write_summary(tmp_path / "good.json", summary({"int8": FAST_TPOTS}))
    assert rep.main(["--run", f"good={good}", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for value in ("good.json", "=good.json", "name="):
        assert rep.main(["--run", value, "--out", str(out)]) == 2
        assert "give NAME=SUMMARY" in capsys.readouterr().err
    assert rep.main(["--run", f"a={good}", "--run", f"a={good}", "--out", str(out)]) == 2
    assert "both runs are named 'a'" in capsys.readouterr().err
    assert rep.main(["--run", f"a={good}"] * 3 + ["--out", str(out)]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
