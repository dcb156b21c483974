"""How long a host function of the PLE gather path can wait for the GIL before its first Python line.

The CUDA driver runs a host function (cuLaunchHostFunc) on a thread Python did not start; the gather
path's is a ctypes callback, so it must take the GIL first, and the GPU stream waits meanwhile. This
times that wait on the CPU, no GPU needed: a thread started natively (pthread_create, as the driver's
is) calls a ctypes callback that notes the time, while the main thread either sleeps (it holds no GIL)
or runs Python (it gives the GIL up only when asked, after the switch interval). Each case runs under
Python's default switch interval (5000 us) and the ple-mmap patch's bound
(VLLM_PLE_MMAP_SWITCH_INTERVAL_US, 100 us), interleaved trial by trial.

    python -m benchmarks.ple.gil_wait --out DIR [--trials 200]

Writes DIR/gil-wait.json and DIR/gil-wait.md. What it shows is CPython's scheduling on this host's
CPU, not the engine's step: whether the engine's threads run Python while a step's host functions are
due is what the engine A/B's -pyswitch arms measure.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

#: (name, switch interval in us): Python's default, and the gather path's bound.
INTERVALS = (("python-default", 5000), ("ple-mmap-bound", 100))
#: What the main thread does while the callback is due.
MAIN = ("sleeps", "runs-python")
DEFAULT_TRIALS = 200

_START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def _pthread():
    libc = ctypes.CDLL(None)  # a CDLL call releases the GIL, as the driver's own calls do
    libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, _START, ctypes.c_void_p]
    libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    return libc


def one_wait(libc, main: str) -> float:
    """Seconds from starting the native thread to its callback's first Python line."""
    seen: list[float] = []

    def callback(_arg):
        seen.append(time.perf_counter())
        return None

    start = _START(callback)
    tid = ctypes.c_ulong()
    t0 = time.perf_counter()
    if libc.pthread_create(ctypes.byref(tid), None, start, None) != 0:
        raise OSError("pthread_create failed")
    if main == "sleeps":
        while not seen:
            time.sleep(0.0005)
    else:
        while not seen:  # Python bytecode the whole time: the GIL goes only when the waiter asks
            pass
    libc.pthread_join(tid, None)
    return seen[0] - t0


def measure(trials: int) -> dict:
    libc = _pthread()
    saved = sys.getswitchinterval()
    waits: dict[str, dict[str, list[float]]] = {name: {m: [] for m in MAIN} for name, _ in INTERVALS}
    try:
        for _ in range(trials):  # interleaved, so drift on the host hits every case alike
            for name, us in INTERVALS:
                sys.setswitchinterval(us / 1e6)
                for m in MAIN:
                    waits[name][m].append(one_wait(libc, m))
    finally:
        sys.setswitchinterval(saved)
    cases = []
    for name, us in INTERVALS:
        for m in MAIN:
            xs = sorted(w * 1e6 for w in waits[name][m])
            q = statistics.quantiles(xs, n=100)
            cases.append({"interval": name, "switch_interval_us": us, "main_thread": m, "trials": len(xs),
                          "p50_us": round(statistics.median(xs), 1), "p90_us": round(q[89], 1),
                          "p99_us": round(q[98], 1), "max_us": round(xs[-1], 1)})
    by = {(c["interval"], c["main_thread"]): c for c in cases}
    busy_default, busy_bound = by[("python-default", "runs-python")], by[("ple-mmap-bound", "runs-python")]
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
            "cases": cases,
            "busy_default_over_bound_p50": round(busy_default["p50_us"] / busy_bound["p50_us"], 1),
            "busy_default_p50_over_interval": round(busy_default["p50_us"] / busy_default["switch_interval_us"], 2),
            "busy_bound_p50_over_interval": round(busy_bound["p50_us"] / busy_bound["switch_interval_us"], 2)}


def markdown(result: dict) -> str:
    lines = ["# GIL wait of a natively started callback (the PLE gather path's host function)", "",
             f"CPython {result['python']} on {result['machine']}, {result['cpus']} CPUs, {result['date']}; "
             f"{result['cases'][0]['trials']} trials per case, interleaved.", "",
             "| switch interval | main thread | p50 us | p90 us | p99 us | max us |", "|---|---|---|---|---|---|"]
    for c in result["cases"]:
        lines.append(f"| {c['switch_interval_us']} us ({c['interval']}) | {c['main_thread']} | {c['p50_us']} | "
                     f"{c['p90_us']} | {c['p99_us']} | {c['max_us']} |")
    (_, default_us), (_, bound_us) = INTERVALS
    lines += ["", f"While the main thread runs Python, the median wait is {result['busy_default_p50_over_interval']}x "
              f"the {default_us} us interval and {result['busy_bound_p50_over_interval']}x the {bound_us} us bound: "
              f"{result['busy_default_over_bound_p50']}x shorter under the bound. On the GPU the stream waits "
              "that long, once per PLE layer per step, whenever an engine thread is running Python then."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for gil-wait.json and gil-wait.md")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="trials per case (default %(default)s)")
    args = p.parse_args(argv)
    if args.trials < 2:
        p.error(f"--trials must be 2 or more, got {args.trials}")
    result = measure(args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gil-wait.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "gil-wait.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
