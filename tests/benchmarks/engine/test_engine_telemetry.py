"""What the A/B records of the GPU and the host around each repeat: nvidia-smi csv lines read or refused,
the GPU summary and its throttle flag, the host's CPU and load and the CPU seconds of a server's
processes (all of one sid) read from a /proc tree built under tmp_path, and the background sampler
itself, without nvidia-smi and with a stand-in nvidia-smi put first on PATH."""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime

import pytest

from benchmarks.engine import telemetry as tm

TICK = os.sysconf("SC_CLK_TCK")


def stamp(t: float) -> str:
    """A time as nvidia-smi stamps its lines: local time, milliseconds."""
    return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def line(t: float, *, sm: float = 1980, reasons: str = "0x0000000000000000") -> str:
    return f"{stamp(t)}, {sm}, 2619, 45, 312.50, 97, {reasons}"


def sample(sm: float = 1980.0, reasons: int = 0, **kw) -> tm.GpuSample:
    fields = {"t": 0.0, "sm_mhz": sm, "mem_mhz": 2619.0, "temp_c": 45.0, "power_w": 300.0, "util_pct": 90.0}
    return tm.GpuSample(**(fields | kw), reasons=reasons)


# --- nvidia-smi lines


def test_a_sample_line_is_read_with_its_local_timestamp_and_hex_reasons():
    t = time.time()
    s = tm.parse_sample(line(t, sm=1755, reasons="0x0000000000000004"))
    assert s == tm.GpuSample(t=pytest.approx(t, abs=0.002), sm_mhz=1755.0, mem_mhz=2619.0, temp_c=45.0,
                             power_w=312.5, util_pct=97.0, reasons=4)


@pytest.mark.parametrize("text", [
    "",
    "2024/05/01 10:00:00.123, 1980, 2619, 45, 312.50, 97",  # cut at shutdown
    "2024/05/01 10:00:00.123, 1980, 2619, 45, [N/A], 97, 0x0",
    "2024/05/01 10:00:00.123, 1980, 2619, 45, 312.50, 97, not-hex",
    "10:00:00, 1980, 2619, 45, 312.50, 97, 0x0",
    "2024/05/01 10:00:00.123, 1980, 2619, 45, 312.50, 97, 0x0, extra",
])
def test_a_line_that_cannot_be_read_is_none(text):
    assert tm.parse_sample(text) is None


# --- the GPU summary


def test_no_samples_summarize_to_none():
    assert tm.summarize_gpu([]) is None


def test_the_summary_spans_the_clocks_and_or_s_the_reasons():
    got = tm.summarize_gpu([sample(1980, temp_c=50.0), sample(1500, reasons=0x1), sample(1800, reasons=0x2)])
    assert got == {"samples": 3, "sm_mhz_min": 1500, "sm_mhz_median": 1800, "sm_mhz_max": 1980,
                   "mem_mhz_median": 2619, "temp_c_max": 50.0, "power_w_median": 300.0, "util_pct_median": 90.0,
                   "clock_event_reasons": "0x3", "throttled": False}


@pytest.mark.parametrize(("reasons", "throttled"), [
    ((0x0,), False),
    ((0x1,), False),  # idle
    ((0x2,), False),  # application clocks
    ((0x1, 0x2), False),
    ((0x4,), True),  # software power cap
    ((0x1, 0x20), True),  # software thermal slowdown beside idle
    ((0x40,), True),  # hardware thermal slowdown
])
def test_throttled_ignores_idle_and_application_clocks_only(reasons, throttled):
    got = tm.summarize_gpu([sample(reasons=r) for r in reasons])
    assert got["throttled"] is throttled


# --- the host, from a /proc tree


def pid_stat(pid: int, comm: str, *, sid: int, utime: int, stime: int) -> str:
    """/proc/PID/stat: pid (comm) state ppid pgrp sid tty_nr tpgid flags minflt cminflt majflt
    cmajflt utime stime cutime cstime ... (utime and stime are fields 14 and 15)."""
    fields = ["S", 1, pid, sid, 0, -1, 4194560, 100, 0, 0, 0, utime, stime, 7, 7, 20, 0, 1, 0, 12345]
    return f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n"


@pytest.fixture
def proc(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    (root / "stat").write_text("cpu  600 10 90 2800 100 0 0 0 0 0\ncpu0 300 5 45 1400 50 0 0 0 0 0\nintr 1 2 3\n")
    (root / "loadavg").write_text("0.52 0.40 0.30 2/345 6789\n")
    processes = ((100, "python3", 100, 3 * TICK, TICK), (101, "VLLM::EngineCore (rank 0)", 100, 2 * TICK, 0),
                 (102, "bash) (odd", 100, TICK, TICK), (200, "other", 200, 50 * TICK, 0))
    for pid, comm, sid, ut, st in processes:
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(pid_stat(pid, comm, sid=sid, utime=ut, stime=st))
    (root / "103").mkdir()  # a process that ended between listing and reading: no stat
    (root / "self").mkdir()
    (root / "self" / "stat").write_text(pid_stat(1, "self", sid=100, utime=1000 * TICK, stime=0))
    return root


def test_cpu_times_are_busy_and_total_jiffies_with_idle_and_iowait_not_busy(proc):
    assert tm.cpu_times(proc) == (700.0, 3600.0)
    (proc / "stat").write_text("cpu  600 10 90 2800\n")  # an old kernel: no iowait column
    assert tm.cpu_times(proc) == (700.0, 3500.0)


def test_cpu_times_without_a_readable_stat_are_none(tmp_path):
    assert tm.cpu_times(tmp_path) is None
    (tmp_path / "stat").write_text("")
    assert tm.cpu_times(tmp_path) is None
    (tmp_path / "stat").write_text("cpu  a b c d\n")
    assert tm.cpu_times(tmp_path) is None


def test_the_cpu_seconds_of_a_sid_are_user_plus_system_of_every_process_in_it(proc):
    # 100: 3 + 1 s, 101 (a comm with spaces): 2 s, 102 (a comm with parentheses): 1 + 1 s; 200 is another
    # sid, 103 has no stat and "self" is no pid.
    assert tm.session_cpu_s(100, proc) == pytest.approx(8.0)
    assert tm.session_cpu_s(200, proc) == pytest.approx(50.0)


def test_a_sid_with_no_live_process_has_no_cpu_seconds(proc, tmp_path):
    assert tm.session_cpu_s(999, proc) is None
    assert tm.session_cpu_s(100, tmp_path / "no-proc") is None


def test_loadavg_is_the_one_minute_figure_or_none(proc, tmp_path):
    assert tm.loadavg(proc) == 0.52
    assert tm.loadavg(tmp_path) is None
    (tmp_path / "loadavg").write_text("busy\n")
    assert tm.loadavg(tmp_path) is None


# --- the sampler


def test_without_nvidia_smi_a_window_has_no_gpu_record_but_the_host_numbers(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    t = tm.Telemetry(out=tmp_path / "gpu.csv", sid=os.getsid(0))
    assert t.proc is None and t.samples() == []
    token = t.begin()
    sum(i * i for i in range(300_000))  # some CPU in this process's sid
    time.sleep(0.05)
    got = t.end(token)
    t.stop()
    assert got["gpu"] is None and got["wall_s"] >= 0.05
    assert isinstance(got["host"]["loadavg_1m"], float)  # the real /proc/loadavg
    assert 0.0 <= got["host"]["cpu_busy"] <= 1.0
    assert got["host"]["server_cpu_s"] >= 0.0
    assert not (tmp_path / "gpu.csv").exists()


def test_without_a_server_sid_the_host_record_has_no_server_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    t = tm.Telemetry(out=tmp_path / "gpu.csv")
    assert "server_cpu_s" not in t.end(t.begin())["host"]


def test_session_zero_is_a_session_too(tmp_path, monkeypatch):
    # In a container whose session leader lies outside its PID namespace, getsid() is 0.
    seen = []
    monkeypatch.setattr(tm, "session_cpu_s", lambda sid: seen.append(sid) or 1.5 * len(seen))
    monkeypatch.setenv("PATH", str(tmp_path))
    t = tm.Telemetry(out=tmp_path / "gpu.csv", sid=0)
    got = t.end(t.begin())
    assert seen == [0, 0] and got["host"]["server_cpu_s"] == 1.5


FAKE_NVIDIA_SMI = """#!{python}
import signal, sys, time
from datetime import datetime

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with open({argv_file!r}, "w") as f:
    f.write("\\n".join(sys.argv[1:]))
print("[N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]", flush=True)
sm = 1000
while True:
    stamp = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    print(f"{{stamp}}, {{sm}}, 2619, 45, 300.00, 90, {reasons}", flush=True)
    sm += 1
    time.sleep(0.05)
"""


def fake_nvidia_smi(tmp_path, monkeypatch, *, reasons: str):
    """An nvidia-smi first on PATH that prints a sample every 50 ms (SM clock 1000, 1001, ...) until SIGTERM,
    and writes the arguments it was given to argv.txt."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable, argv_file=str(tmp_path / "argv.txt"),
                                             reasons=reasons))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "argv.txt"


def wait_for(cond, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_with_nvidia_smi_a_window_summarizes_only_the_samples_taken_inside_it(tmp_path, monkeypatch):
    argv = fake_nvidia_smi(tmp_path, monkeypatch, reasons="0x0000000000000004")
    t = tm.Telemetry(out=tmp_path / "gpu.csv", sid=os.getsid(0))
    try:
        wait_for(lambda: len(t.samples()) >= 3)  # samples before the window opens
        before = max(s.sm_mhz for s in t.samples())
        token = t.begin()
        time.sleep(0.4)
        got = t.end(token)
    finally:
        t.stop()
    assert t.proc.poll() is not None and t.handle.closed
    assert argv.read_text().splitlines() == ["--query-gpu=" + ",".join(tm.GPU_FIELDS),
                                             "--format=csv,noheader,nounits", f"-lms={tm.SAMPLE_MS}"]
    gpu = got["gpu"]
    assert 2 <= gpu["samples"] < len(t.samples())
    assert gpu["sm_mhz_min"] >= before and gpu["sm_mhz_max"] > gpu["sm_mhz_min"]
    assert gpu["clock_event_reasons"] == "0x4" and gpu["throttled"] is True
    assert got["host"]["loadavg_1m"] is not None and "server_cpu_s" in got["host"]


def test_a_stopped_sampler_keeps_its_samples_and_idle_reasons_are_no_throttle(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, reasons="0x0000000000000001")
    t = tm.Telemetry(out=tmp_path / "gpu.csv")
    try:
        token = t.begin()
        wait_for(lambda: len(t.samples()) >= 2)
    finally:
        t.stop()
    got = t.end(token)
    assert got["gpu"]["samples"] >= 2 and got["gpu"]["throttled"] is False
    t.stop()  # a second stop is harmless
