"""What the GPU and the host were doing while a repeat ran: GPU clocks, temperature, power and the
driver's clock-event reasons (sampled by `nvidia-smi -lms` in the background), the host's load and
CPU use, and the CPU seconds of the server's own processes. A run whose clocks dropped or whose host
was busy explains its outlier; without this record it cannot.

Standard library only: it runs on the GPU host beside the servers.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

#: Fields in the order nvidia-smi prints them (csv, noheader, nounits).
GPU_FIELDS = ("timestamp", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "utilization.gpu",
              "clocks_event_reasons.active")
SAMPLE_MS = 200
#: Reasons that only mean "idle" or "the application asked for these clocks": not a throttle.
BENIGN_REASONS = 0x1 | 0x2


@dataclass(frozen=True)
class GpuSample:
    t: float
    sm_mhz: float
    mem_mhz: float
    temp_c: float
    power_w: float
    util_pct: float
    reasons: int


def parse_sample(line: str) -> GpuSample | None:
    """One `nvidia-smi --format=csv,noheader,nounits` line of GPU_FIELDS; None for one it cannot read
    (a '[N/A]' field, a partial line at shutdown). nvidia-smi stamps it in local time, as time.time()
    is compared with it."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(GPU_FIELDS):
        return None
    try:
        t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        nums = [float(p) for p in parts[1:6]]
        reasons = int(parts[6], 16)
    except ValueError:
        return None
    return GpuSample(t, *nums, reasons)


def summarize_gpu(samples: list[GpuSample]) -> dict | None:
    if not samples:
        return None
    sm = [s.sm_mhz for s in samples]
    reasons = 0
    for s in samples:
        reasons |= s.reasons
    return {"samples": len(samples), "sm_mhz_min": min(sm), "sm_mhz_median": statistics.median(sm),
            "sm_mhz_max": max(sm), "mem_mhz_median": statistics.median(s.mem_mhz for s in samples),
            "temp_c_max": max(s.temp_c for s in samples),
            "power_w_median": statistics.median(s.power_w for s in samples),
            "util_pct_median": statistics.median(s.util_pct for s in samples),
            "clock_event_reasons": f"{reasons:#x}", "throttled": bool(reasons & ~BENIGN_REASONS)}


def cpu_times(proc: Path = Path("/proc")) -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat; None where there is none."""
    try:
        fields = [float(x) for x in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def session_cpu_s(sid: int, proc: Path = Path("/proc")) -> float | None:
    """CPU seconds (user + system) of every live process in session `sid`: a server started in its own
    session (start_new_session) and the engine processes it forks."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total, found = 0.0, False
    for d in proc.iterdir() if proc.is_dir() else ():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state is field 3
        if len(rest) > 12 and int(rest[3]) == sid:
            total += (float(rest[11]) + float(rest[12])) / tick
            found = True
    return total if found else None


def loadavg(proc: Path = Path("/proc")) -> float | None:
    try:
        return float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Telemetry:
    """A background `nvidia-smi -lms` for the life of one server, and windows over it:
    `begin()` before a repeat, `end(token)` after it returns that window's record."""

    def __init__(self, *, out: Path, sid: int | None = None) -> None:
        self.out, self.sid = out, sid
        self.proc: subprocess.Popen | None = None
        self._samples: list[GpuSample] = []
        self._read = 0  # bytes of `out` already parsed into _samples
        if shutil.which("nvidia-smi"):
            self.handle = out.open("w")
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits",
                 f"-lms={SAMPLE_MS}"], stdout=self.handle, stderr=subprocess.DEVNULL)

    def samples(self) -> list[GpuSample]:
        """Every sample so far; each call parses only the whole lines written since the last."""
        if self.proc is None or not self.out.is_file():
            return []
        with self.out.open("rb") as f:
            f.seek(self._read)
            new = f.read()
        whole = new[:new.rfind(b"\n") + 1]  # a line still being written waits for the next call
        self._read += len(whole)
        got = (parse_sample(line) for line in whole.decode(errors="replace").splitlines())
        self._samples += [s for s in got if s is not None]
        return self._samples

    def begin(self) -> dict:
        return {"t": time.time(), "cpu": cpu_times(), "server_cpu_s": session_cpu_s(self.sid) if self.sid is not None else None,
                "loadavg_1m": loadavg()}

    def end(self, token: dict) -> dict:
        t1, cpu1 = time.time(), cpu_times()
        window = [s for s in self.samples() if token["t"] <= s.t <= t1]
        host: dict = {"loadavg_1m": token["loadavg_1m"]}
        if token["cpu"] and cpu1 and cpu1[1] > token["cpu"][1]:
            host["cpu_busy"] = round((cpu1[0] - token["cpu"][0]) / (cpu1[1] - token["cpu"][1]), 3)
        if token["server_cpu_s"] is not None and (now := session_cpu_s(self.sid)) is not None:
            host["server_cpu_s"] = round(now - token["server_cpu_s"], 2)
        return {"wall_s": round(t1 - token["t"], 3), "gpu": summarize_gpu(window), "host": host}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc is not None:
            self.handle.close()
