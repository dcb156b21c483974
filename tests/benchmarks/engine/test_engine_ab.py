"""The engine A/B: the flags its servers get, the arm order it accepts, how it shares the run's time
between arms, the cells it runs and the trace it reads; the options that start it and the launch plan
of an A/B arm; and one whole A/B driven through `driver.measure` with a local transport whose python
is a stand-in server (engine_stand_in.py): every arm served alone, in the order given, measured and
profiled, and stopped before the next one starts."""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import pytest

from benchmarks.engine import ab
from benchmarks.engine import driver
from benchmarks.engine import servers as sv
from benchmarks.engine.phases import BENCH_CONCURRENCY, BENCH_LENGTHS
from benchmarks.engine.transport.local import LocalTransport
from builder.config import launch_plan, load_target
from tests.benchmarks.engine import engine_stand_in

LABELS = ("int8", "fp8", "bf16")


# --- the servers' flags


def test_prefix_caching_is_off_with_or_without_a_profile():
    assert ab.ab_args(profile_dir=None) == ["--no-enable-prefix-caching"]
    assert ab.ab_args(profile_dir=None)[0] == ab.ab_args(profile_dir=Path("/p"))[0]


def test_the_profiler_config_is_json_naming_torch_and_the_folder(tmp_path):
    args = ab.ab_args(profile_dir=tmp_path / "profiles" / "int8")
    assert args[:2] == ["--no-enable-prefix-caching", "--profiler-config"] and len(args) == 3
    cfg = json.loads(args[2])
    assert cfg["profiler"] == "torch" and cfg["torch_profiler_dir"] == str(tmp_path / "profiles" / "int8")
    assert " " not in args[2]  # one argv word, as compact as a hand-written flag


# --- the arm order


@pytest.mark.parametrize(("text", "order"), [
    ("bf16,fp8,int8", ("bf16", "fp8", "int8")),
    (" fp8 , int8 ", ("fp8", "int8")),
    ("int8,int8-pinned", ("int8", "int8-pinned")),
    ("int8-pinned,bf16,int8,fp8-pinned", ("int8-pinned", "bf16", "int8", "fp8-pinned")),
    ("int8-pyswitch,int8,int8-pinned", ("int8-pyswitch", "int8", "int8-pinned")),
    ("int8-pinned-cold,int8-cold,int8-pinned-pyswitch", ("int8-pinned-cold", "int8-cold", "int8-pinned-pyswitch")),
])
def test_an_order_of_the_layouts_arms_and_their_variants_is_taken_as_written(text, order):
    assert ab.parse_order(text, LABELS) == order


@pytest.mark.parametrize("text", ["", " , ", "int4", "int8,int8", "int8-pinned,int8-pinned", "fp16-pinned",
                                  "int8-pinned-pinned", "int8-pyswitch-pinned", "int8-cold-pinned", "int8,INT8",
                                  "int8;fp8", "int8-pyswitch,int8-pyswitch"])
def test_an_order_with_an_unknown_a_repeated_or_no_arm_is_refused(text):
    with pytest.raises(ValueError, match="at most once each"):
        ab.parse_order(text, LABELS)


def test_suffixes_combine_their_flags_environment_and_coldness():
    assert ab.split_label("int8-pinned-cold") == ("int8", ("-pinned", "-cold"))
    assert ab.split_label("bf16") == ("bf16", ())
    v = ab.variant_of(("-pinned", "-pyswitch", "-cold"))
    assert v.args == ab.VARIANTS["-pinned"].args and dict(v.env) == {"VLLM_PLE_MMAP_SWITCH_INTERVAL_US": "0"} and v.cold
    assert ab.variant_of(()) == ab.Variant()


def test_an_arm_outside_the_layout_is_refused():
    with pytest.raises(ValueError, match="name arms of int8,bf16"):
        ab.parse_order("int8,fp8", ("int8", "bf16"))


# --- the time each arm measures


def run_shares(*, budget: float, starts: list[float]) -> tuple[list[float], float]:
    """The measuring seconds each arm gets when the run goes as planned, and what is left at its end: an
    arm starts (its start-up from `starts`), measures its share, stops in ARM_STOP_S, the next one starts."""
    left, shares = budget, []
    for i, start in enumerate(starts):
        left -= start
        share = ab.arm_seconds(left=left, arms_left=len(starts) - i, start_s=start)
        shares.append(share)
        left -= share + ab.ARM_STOP_S
    return shares, left


def test_the_arms_share_the_run_evenly_and_use_all_of_it():
    shares, left = run_shares(budget=1200, starts=[40, 40, 40])
    assert left == pytest.approx(0, abs=1e-6)
    assert min(shares) > 300 and max(shares) - min(shares) < 1e-6
    # The last arm measures all that is left but its own stop.
    assert ab.arm_seconds(left=100, arms_left=1, start_s=500) == pytest.approx(100 - ab.ARM_STOP_S)


def test_a_long_first_start_up_is_not_assumed_for_the_later_arms():
    """The first server compiles the kernels the later ones find cached: its 250 s start-up taken for
    theirs would leave the first arm nothing of 400 s; capped at LATER_START_S it leaves every arm a share."""
    uncapped = (400 - 2 * 250 - 3 * ab.ARM_STOP_S) / 3
    assert uncapped < 0
    first = ab.arm_seconds(left=400, arms_left=3, start_s=250)
    assert first == pytest.approx((400 - 2 * ab.LATER_START_S - 3 * ab.ARM_STOP_S) / 3)
    shares, left = run_shares(budget=650, starts=[250, 30, 30])
    assert shares[0] == first and all(s >= first for s in shares) and left >= 0


def test_a_share_is_never_negative():
    assert ab.arm_seconds(left=10, arms_left=3, start_s=30) == 0.0
    assert ab.arm_seconds(left=-5, arms_left=1, start_s=0) == 0.0


# --- the cells and the trace


def test_the_grid_runs_every_cell_length_by_length_and_a_filter_keeps_that_order():
    assert ab.grid(None) == [(n, c) for n in BENCH_LENGTHS for c in BENCH_CONCURRENCY]
    assert ab.grid(frozenset({(131072, 1), (8192, 16), (32768, 4)})) == [(8192, 16), (32768, 4), (131072, 1)]
    assert ab.grid(frozenset()) == []


def test_the_newest_trace_written_since_the_pass_started_is_the_one_read(tmp_path):
    since = time.time()
    old = tmp_path / "int8" / "in8192-c1-old.pt.trace.json.gz"
    old.parent.mkdir()
    old.write_text("{}")
    os.utime(old, (since - 60, since - 60))
    assert ab.newest_trace(tmp_path, since) is None  # only an older pass's trace
    first, second = tmp_path / "a.pt.trace.json", tmp_path / "int8" / "b.pt.trace.json.gz"
    for path, age in ((first, 2), (second, 1)):
        path.write_text("{}")
        os.utime(path, (since + age, since + age))
    (tmp_path / "c.pt.trace.json.gz.tmp").write_text("")  # still being written
    (tmp_path / "c.log").write_text("")
    for path in (tmp_path / "c.pt.trace.json.gz.tmp", tmp_path / "c.log"):
        os.utime(path, (since + 5, since + 5))
    assert ab.newest_trace(tmp_path, since) == first
    os.utime(old, (since + 9, since + 9))  # rewritten during this pass: it counts again
    assert ab.newest_trace(tmp_path, since) == old


def test_traces_stay_while_the_kept_ones_fit_the_cap_and_plain_json_never(tmp_path):
    def trace(name: str, size: int) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        return path

    # One pass after another, as the A/B writes them: each trace is judged as it arrives.
    first = trace("int8/t.pt.trace.json.gz", 40)
    assert ab.keep_trace(first, tmp_path, cap=100)
    second = trace("fp8/t.pt.trace.json.gz", 40)
    assert ab.keep_trace(second, tmp_path, cap=100)
    third = trace("bf16/t.pt.trace.json.gz", 40)
    assert not ab.keep_trace(third, tmp_path, cap=100) and not third.exists()  # 120 > 100
    plain = trace("int8/u.pt.trace.json", 1)
    assert not ab.keep_trace(plain, tmp_path, cap=100) and not plain.exists()
    assert first.exists() and second.exists()


# --- the options that start an A/B


def parse(*argv: str) -> dict:
    p = argparse.ArgumentParser(prog="measure")
    driver.add_measure_options(p, budget_s=100)
    return driver.measure_options(p, p.parse_args(list(argv)))


def test_the_ab_phase_alone_is_accepted_with_the_defaults():
    got = parse("--phases", "ab")
    assert got["phases"] == ("ab",) and got["ab_order"] is None and got["ab_mtp"] == 0 and got["ab_profile"]
    assert got["bench_repeats"] is None  # measure picks 1 for the bench, ab.DEFAULT_REPEATS for the A/B
    assert parse("--phases", "ab", "--ab-no-profile", "--ab-mtp", "4")["ab_profile"] is False
    assert got["ab_sweep"] == ()


@pytest.mark.parametrize(("argv", "message"), [
    (("--phases", "ab,bench"), "ab runs alone"),
    (("--phases", "gates,ab"), "ab runs alone"),
    (("--phases", "ab", "--ab-order", "int8,int8"), "--ab-order: name arms of int8,fp8,bf16"),
    (("--phases", "ab", "--layout", "tp2-ep", "--ab-order", "fp8"), "--ab-order: name arms of int8,bf16"),
    (("--phases", "ab", "--ab-mtp", "5"), "--ab-mtp must be 0..4"),
    (("--phases", "ab", "--ab-mtp", "-1"), "--ab-mtp must be 0..4"),
    (("--phases", "ab", "--bench-repeats", "0"), "--bench-repeats must be 1 or more"),
    (("--phases", "ab", "--ab-sweep", "1,fast"), "--ab-sweep: request rates per second"),
    (("--phases", "ab", "--ab-sweep", "1,0"), "--ab-sweep: each rate positive and given once"),
    (("--phases", "ab", "--ab-sweep", "2,2"), "--ab-sweep: each rate positive and given once"),
])
def test_a_wrong_ab_option_is_refused_with_its_reason(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse(*argv)
    assert message in capsys.readouterr().err


def test_an_order_with_a_pinned_twin_parses_to_that_order():
    assert parse("--phases", "ab", "--ab-order", "int8,int8-pinned")["ab_order"] == ("int8", "int8-pinned")


def test_an_ab_arm_serves_with_graphs_the_grids_concurrency_and_mtp_only_when_asked():
    base = load_target(sv.TARGET)
    argv = launch_plan(sv.arm_config(base, kv_dtype="fp8", port=1, graphs=True, mtp_k=0, max_num_seqs=16)).argv(
        model_path="/m")
    assert "--speculative-config" not in argv and "--enforce-eager" not in argv
    assert argv[argv.index("--max-num-seqs") + 1] == "16"
    argv = launch_plan(sv.arm_config(base, kv_dtype="fp8", port=1, graphs=True, mtp_k=4, max_num_seqs=16)).argv(
        model_path="/m")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == 4


# --- a whole A/B


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def stand_in_events(tmp_path, monkeypatch):
    """Where the stand-ins log; any stand-in still running after the test (a failed one) is killed."""
    import signal

    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(engine_stand_in.EVENTS_ENV, str(path))
    yield path
    for pid in {e["pid"] for e in engine_stand_in.events(path)}:
        try:
            if engine_stand_in.__name__ in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def stand_in_transport(tmp_path, free_port, monkeypatch) -> LocalTransport:
    """A local transport whose "engine" is the stand-in, every arm on `free_port`."""
    monkeypatch.setitem(sv.LAYOUTS, "tp1", (None, tuple((label, dtype, free_port) for label, dtype, _ in sv.ARMS)))
    t = LocalTransport(out=tmp_path / "out", python=str(engine_stand_in.interpreter(tmp_path)),
                       state=tmp_path / "state")
    t.checked = {"python": t.python, "vllm": "stand-in", "gpus": 1}  # no probe for vLLM or a GPU
    t.model_dir.mkdir(parents=True)
    (t.model_dir / sv.MODEL_MARKER).write_text(json.dumps({"seed": 0}))
    return t


def test_a_cold_arm_starts_with_the_model_out_of_the_page_cache_and_neither_warms_up_nor_profiles(
        tmp_path, free_port, monkeypatch, stand_in_events):
    """int8-cold then int8, one cell, two repeats: the cold arm's server starts after the model's files
    left the page cache, and answers only the timed passes (each: one untimed request + 2 prompts); the
    warm arm also answers its warm-up and profiled passes."""
    t = stand_in_transport(tmp_path, free_port, monkeypatch)
    (t.model_dir / "model.safetensors").write_bytes(bytes(range(256)) * 8192)  # 2 MiB, in the cache once written
    rc = driver.measure(t, budget_s=200, phases=("ab",), bench_cells=frozenset({(8192, 1)}), bench_repeats=2,
                        ab_order=("int8-cold", "int8"))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert rc == 0 and "error" not in summary, summary.get("error")
    cold, warm = summary["ab"]["arms"]["int8-cold"], summary["ab"]["arms"]["int8"]
    assert cold["page_cache"]["files"] == 2 and cold["page_cache"]["resident_before"] > 0.9
    assert cold["page_cache"]["resident_after_evict"] == 0.0 and "resident_at_ready" in cold["page_cache"]
    assert "page_cache" not in warm
    assert cold["profiles"] == {} and "--profiler-config" not in cold["argv"] and "--profiler-config" in warm["argv"]
    closed = [e for e in engine_stand_in.events(stand_in_events) if e["event"] == "closed"]
    assert closed[0]["completions"] == 2 * 3
    assert closed[1]["completions"] > 2 * 3  # warm-ups (8192 x 4 and x 1) and the profiled pass besides


def test_the_request_rate_sweep_sends_every_arm_the_same_seeded_arrivals_and_reports_goodput(
        tmp_path, free_port, monkeypatch, stand_in_events):
    """Two arms, rates 40 and 20 per second given out of order, 4 prompts a rate (the 8192 x 4 cell's):
    each arm's sweep runs slowest first after its repeats, every request completes, and goodput is
    counted under the stated limits."""
    t = stand_in_transport(tmp_path, free_port, monkeypatch)
    monkeypatch.setattr(ab, "SWEEP_LENGTH", 8192)
    monkeypatch.setattr(ab, "SWEEP_REQUESTS", 4)
    opts = parse("--phases", "ab", "--ab-sweep", "40,20", "--ab-no-profile")
    assert opts["ab_sweep"] == (20.0, 40.0)
    rc = driver.measure(t, budget_s=200, phases=("ab",), bench_cells=frozenset({(8192, 1)}), bench_repeats=1,
                        ab_order=("int8", "fp8"), ab_profile=False, ab_sweep=opts["ab_sweep"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert rc == 0 and "error" not in summary, summary.get("error")
    got = summary["ab"]
    assert got["sweep"] == {"rates": [20.0, 40.0], "input_len": 8192, "requests": 4, "seed": ab.SWEEP_SEED,
                            "slo": ab.SWEEP_SLO}
    assert [(r["arm"], r["sweep_rate"]) for r in got["sweep_results"]] == [
        ("int8", 20.0), ("int8", 40.0), ("fp8", 20.0), ("fp8", 40.0)]
    assert all("sweep_rate" not in r for r in got["results"]) and len(got["results"]) == 2
    for r in got["sweep_results"]:
        assert r["completed"] == 4 and r["num_prompts"] == 4 and "error" not in r, r
        assert 0 <= r["goodput"] <= r["request_throughput"] and "wall_s" in r["telemetry"]


def test_a_whole_ab_serves_each_arm_alone_in_the_order_given(tmp_path, free_port, monkeypatch, stand_in_events):
    """Four arms, one 8192 x 1 cell, two repeats, 200 s of budget; every arm on the same port, as int8
    and its pinned twin are in the real layout. The stand-in logs when it listens and when it has
    closed: each server closed before the next one listened, and none is left running at the end."""
    t = stand_in_transport(tmp_path, free_port, monkeypatch)
    # The stand-in writes its trace before /stop_profile answers: a missing one is missing for good.
    monkeypatch.setattr(ab, "TRACE_WAIT_S", 5)
    order = ("int8-pinned", "bf16", "int8-pyswitch", "int8")

    started = time.monotonic()
    rc = driver.measure(t, budget_s=200, phases=("ab",), bench_cells=frozenset({(8192, 1)}), bench_repeats=2,
                        ab_order=order)
    took = time.monotonic() - started

    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert rc == 0 and "error" not in summary, summary.get("error")
    # One at a time: listening, closed, listening, closed, ... each by its own process, none failing to bind.
    log = engine_stand_in.events(stand_in_events)
    assert [e["event"] for e in log] == ["listening", "closed"] * len(order), log
    pids = [e["pid"] for e in log]
    assert pids[0::2] == pids[1::2] and len(set(pids)) == len(order)
    assert all(a["t"] <= b["t"] for a, b in zip(log, log[1:]))
    assert not any(alive(pid) for pid in pids) and not listening(free_port)

    got = summary["ab"]
    assert got["order"] == list(order) and got["cells"] == [[8192, 1]] and got["repeats"] == 2 and got["mtp_k"] == 0
    assert list(got["arms"]) == list(order) and "ab_s" in summary["phases"] and summary["graphs"]
    for position, label in enumerate(order):
        arm = got["arms"][label]
        assert arm["state"] == "ready" and arm["position"] == position and "error" not in arm, arm
        assert "--no-enable-prefix-caching" in arm["argv"] and "--profiler-config" in arm["argv"]
        assert arm["argv"][arm["argv"].index("--max-num-seqs") + 1] == str(max(BENCH_CONCURRENCY))
        assert "--enforce-eager" not in arm["argv"] and "--speculative-config" not in arm["argv"]
        assert arm["repeats_done"] == 2 and arm["skipped"] == [] and arm["measure_s"] > 0
        decode = arm["profiles"]["in8192-c1"]["decode"]
        assert decode["steps"] > 0 and decode["gen_requests"] == 1, arm["profiles"]
        results = [r for r in got["results"] if r["arm"] == label]
        assert [r["repeat"] for r in results] == [0, 1]
        assert all(r["completed"] == 2 and "error" not in r and "loadavg_1m" in r["telemetry"]["host"] for r in results)
    assert got["arms"]["int8-pinned"]["argv"][-2:] == ["--engram-config", '{"cpu_offload":true}']
    assert "--engram-config" not in got["arms"]["int8"]["argv"][-2:]
    # -pyswitch: Python's own switch interval for the gather path, by environment alone; no other arm sets it
    assert [e["switch_us"] for e in log[0::2]] == [None, None, "0", None]
    def flags(label: str) -> list[str]:  # the argv but the arm's own profile folder
        return [a.replace(f"/{label}", "/ARM") for a in got["arms"][label]["argv"]]

    assert flags("int8-pyswitch") == flags("int8")
    done = [got["arms"][label]["done_s"] for label in order]
    assert done == sorted(done)
    # Each trace read; the small ones stay beside the summary (gzip), named by the profile that kept it.
    kept = sorted(p.parent.name for p in (tmp_path / "out" / ab.PROFILE_DIR).rglob("*.json*"))
    assert kept == sorted(label for label in order if got["arms"][label]["profiles"]["in8192-c1"]["trace_kept"])
    assert kept and all(got["arms"][label]["profiles"]["in8192-c1"]["activities"] == ["CUDA"] for label in order)
    assert took < 20
