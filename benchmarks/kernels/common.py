"""Timing and output shared by the kernel benchmarks: GPU time per launch with host work hidden,
device copy bandwidth, the software and driver a run used, and JSON written atomically."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import torch

# GPU cycles (~1 ms on an H200) of a spin kernel queued ahead of each timed launch,
# longer than any arm's host-side launch work.
HOST_COVER_CYCLES = 2_000_000


def time_launches(fns: dict[str, callable], *, reps: int, warmup: int, hide_host: bool = True) -> dict[str, list[float]]:
    """Per-launch GPU ms for each arm, arms interleaved in every rep.

    With hide_host, a spin kernel runs ahead of each start event, so the Python
    wrapper and Triton's launcher do their host work while the GPU is busy and
    the events time only the GPU work (as under the CUDA graphs vLLM replays
    for decode). Without it, host launch work (~0.1 ms here) is counted too.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if hide_host:
                torch.cuda._sleep(HOST_COVER_CYCLES)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop))
    return times


def copy_bandwidth(reps: int) -> float:
    """Device-to-device copy, bytes read + written per second (TB/s)."""
    src = torch.empty(1 << 31, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = time_launches({"copy": lambda: dst.copy_(src)}, reps=reps, warmup=3)["copy"]
    return 2 * (1 << 31) / (statistics.median(times) * 1e-3) / 1e12


def driver() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict:
    return {
        "torch": torch.__version__, "triton": __import__("triton").__version__, "gpu": torch.cuda.get_device_name(),
        "cuda": torch.version.cuda, "driver": driver(),
    }  # fmt: skip


def write_json(out: Path, name: str, payload: dict, *, indent: int = 1) -> None:
    """out/name via a temporary file, so a run cut short never leaves half a file."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"{name}.tmp"
    tmp.write_text(json.dumps(payload, indent=indent) + "\n")
    tmp.replace(out / name)
