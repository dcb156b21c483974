"""The engine A/B: each KV-dtype arm served alone on the GPU (no idle neighbour sharing its host or
GPU), the same prompts for every arm and repeat, the bench grid's cells repeated, the GPU's clocks and
the host's load recorded for every repeat, and one profiled pass per cell whose decode steps say where
the step's time goes (breakdown.py).

Servers run the h200-small launch plan with CUDA graphs and three A/B settings, each for a reason:
  - MTP off by default (`--ab-mtp 0`): with random weights every draft is rejected, so MTP k=4 costs
    four draft passes and a five-token verify to keep one token; `--ab-mtp 4` measures that apart;
  - prefix caching off: every repeat sends the same prompts, and each must prefill them whole;
  - max_num_seqs = the grid's largest concurrency: vLLM sizes its CUDA-graph capture list from it
    (the default captures dozens of batch sizes the grid never runs, minutes of start-up per server).
Arms share the run's measuring time evenly once each is up (arm_seconds), so a run that runs short
loses repeats on every arm alike rather than one arm whole. Standard library only at module level.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.engine import page_cache
from benchmarks.engine import servers as sv
from benchmarks.engine.phases import (BENCH_CONCURRENCY, BENCH_LENGTHS, BENCH_OUTPUT_TOKENS, cell_name, cell_workload,
                                     error_text, grid)
from benchmarks.engine.servers import log

if TYPE_CHECKING:
    from benchmarks.engine.driver import Clock

DEFAULT_REPEATS = 5
PROFILE_DIR = "profiles"
#: What the profiled pass records; the summary names it, so a report can tell how a breakdown was made.
PROFILER_ACTIVITIES = ("CUDA",)
#: A profiled pass's trace stays in the results (gzip, for a later look at the timeline) while the
#: traces kept so far, it included, stay under this: the results come back as one file of at most 15 MiB.
KEEP_TRACES_BYTES = 8_000_000
#: Long enough for the profiled pass's trace to be written after /stop_profile returns.
TRACE_WAIT_S = 120
#: A profiled pass starts only with this much of the arm's time left (the pass, writing and reading its trace).
PROFILE_RESERVE_S = 25
#: Kept back for stopping each server.
ARM_STOP_S = 15
#: What a later arm's start-up is assumed to take at most: the first start compiles Triton and Inductor
#: kernels the later ones find cached, so its own start-up would overstate theirs.
LATER_START_S = 90
#: The request-rate sweep (`--ab-sweep`): its prompt length, requests per rate, arrival seed (the same
#: arrival times for every arm) and the limits goodput counts a request within.
SWEEP_LENGTH = 32768
SWEEP_REQUESTS = 16
SWEEP_SEED = 0
SWEEP_SLO = {"ttft_ms": 1000.0, "tpot_ms": 20.0}


def reserved_s(*, arms_left: int, start_s: float) -> float:
    """What `arms_left` arms (this one included) keep back of the run: the later arms' start-ups, each
    taken as this one's but at most LATER_START_S, and every arm's stop."""
    return (arms_left - 1) * min(start_s, LATER_START_S) + arms_left * ARM_STOP_S


def arm_seconds(*, left: float, arms_left: int, start_s: float) -> float:
    """The measuring time of an arm that is up, with `left` seconds of the run and `arms_left` arms
    still to measure (this one included): an even share of what reserved_s leaves."""
    return max(0.0, (left - reserved_s(arms_left=arms_left, start_s=start_s)) / arms_left)


def ab_args(*, profile_dir: Path | None) -> list[str]:
    """The server flags the A/B adds to the launch plan (module docstring)."""
    args = ["--no-enable-prefix-caching"]
    if profile_dir is not None:
        # Traces only when /start_profile asks; CUDA activity alone (kernels, copies and the host's CUDA
        # calls): recording CPU ops would slow the host work the breakdown measures. No key table.
        cfg = {"profiler": "torch", "torch_profiler_dir": str(profile_dir), "torch_profiler_with_stack": False,
               "ignore_frontend": True, "torch_profiler_dump_cuda_time_total": False,
               "torch_profiler_activities": list(PROFILER_ACTIVITIES)}
        args += ["--profiler-config", json.dumps(cfg, separators=(",", ":"))]
    return args


@dataclass(frozen=True)
class Variant:
    """An arm label suffix: the same KV dtype served another way, to measure what that way costs."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: The server starts with the checkpoint (the PLE table's mapping) out of the page cache, and the
    #: arm neither warms up nor profiles: its first timed repeat of the first cell is the cold one.
    cold: bool = False


#: Suffixes combine in this order ('int8-pinned-cold'); the last --engram-config wins.
VARIANTS: dict[str, Variant] = {
    # the PLE table pinned in host memory instead of memory-mapped: what the mmap costs
    "-pinned": Variant(args=("--engram-config", '{"cpu_offload":true}')),
    # the gather path under Python's own 5 ms thread switch interval: what the bound saves
    "-pyswitch": Variant(env=(("VLLM_PLE_MMAP_SWITCH_INTERVAL_US", "0"),)),
    # the page cache cold at start: what the first requests pay to read the table from disk
    "-cold": Variant(cold=True),
}


def split_label(label: str) -> tuple[str, tuple[str, ...]]:
    """'int8-pinned-cold' -> ('int8', ('-pinned', '-cold')); 'int8' -> ('int8', ()). Suffixes come in
    VARIANTS order, each at most once; anything else stays in the base (and fails parse_order)."""
    found: list[str] = []
    for suffix in reversed(VARIANTS):
        if label.endswith(suffix):
            label = label.removesuffix(suffix)
            found.insert(0, suffix)
    return label, tuple(found)


def variant_of(suffixes: tuple[str, ...]) -> Variant:
    """The suffixes' flags, environment and coldness together."""
    return Variant(args=tuple(a for s in suffixes for a in VARIANTS[s].args),
                   env=tuple(e for s in suffixes for e in VARIANTS[s].env),
                   cold=any(VARIANTS[s].cold for s in suffixes))


def parse_order(text: str, labels: tuple[str, ...]) -> tuple[str, ...]:
    """'bf16,fp8,int8' -> the arms in that order: the layout's arms, each at most once, any of them
    with VARIANTS suffixes for a twin served another way (e.g. 'int8,int8-pinned,int8-pinned-cold')."""
    order = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in order if split_label(x)[0] not in labels]
    if not order or bad or len(set(order)) != len(order):
        raise ValueError(f"name arms of {','.join(labels)} (each may also carry suffixes of "
                         f"{''.join(VARIANTS)}, in that order) at most once each, got {text!r}")
    return order


async def cell_prompts(client, server: dict, length: int, conc: int, cache: Path) -> list[str]:
    """The cell's prompts, fitted once on the first arm's server and kept under the state: every arm and
    every later run sends exactly these (same tokenizer; fitting a 128K prompt costs seconds)."""
    from builder.measure import client as bench

    path = cache / f"{cell_name(length, conc)}.json"
    if path.is_file():
        return json.loads(path.read_text())
    prompts = await bench.workload_prompts(client, server["url"], server["cfg"].model.served_name,
                                           cell_workload(length, conc), nonce=f"ab-{length}x{conc}")
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prompts))
    return prompts


def newest_trace(folder: Path, since: float) -> Path | None:
    found = [p for p in folder.rglob("*.json*") if p.stat().st_mtime >= since and not p.name.endswith(".tmp")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def keep_trace(trace: Path, profiles: Path, cap: int = KEEP_TRACES_BYTES) -> bool:
    """Whether `trace` stays: gzip, and with the traces already kept under `profiles` no larger than
    `cap`. Otherwise it is deleted."""
    others = sum(p.stat().st_size for p in profiles.rglob("*.json.gz") if p != trace)
    kept = trace.name.endswith(".gz") and others + trace.stat().st_size <= cap
    if not kept:
        trace.unlink()
    return kept


async def profile_pass(client, server: dict, length: int, conc: int, prompts: list[str], folder: Path) -> dict:
    """One untimed pass of the cell under the torch profiler; its decode steps summarized (breakdown.py).
    The trace stays beside the summary while the kept traces fit KEEP_TRACES_BYTES; past that it is
    deleted (the results must come back small, and the summary keeps every kernel that matters)."""
    from benchmarks.engine import breakdown
    from builder.measure import client as bench

    folder.mkdir(parents=True, exist_ok=True)
    since = time.time()
    await client.post(f"{server['url']}/start_profile", json={"profile_prefix": cell_name(length, conc)}, timeout=60)
    try:
        res = await bench.run_workload(client, server["url"], server["cfg"].model.served_name,
                                       cell_workload(length, conc), nonce=f"ab-{length}x{conc}", prompts=prompts)
    finally:
        await client.post(f"{server['url']}/stop_profile", timeout=TRACE_WAIT_S)
    deadline = time.monotonic() + TRACE_WAIT_S
    trace, size = None, -1
    while time.monotonic() < deadline:  # until a trace is there and stopped growing
        trace = newest_trace(folder, since)
        if trace is not None and trace.stat().st_size == size:
            break
        size = trace.stat().st_size if trace is not None else -1
        time.sleep(1)
    else:
        return {"error": f"no finished trace in {folder} {TRACE_WAIT_S} s after /stop_profile"}
    size = trace.stat().st_size
    try:
        out = breakdown.summarize(trace, gen_requests=conc)
    finally:
        kept = keep_trace(trace, folder.parent)
    out.update(trace_bytes=size, trace_kept=kept, activities=list(PROFILER_ACTIVITIES),
               profiled_median_tpot_ms=res.get("median_tpot_ms"))
    return out


async def run_arm(server: dict, label: str, *, cells: list[tuple[int, int]], repeats: int, deadline: float,
                  state: Path, work: Path, profile: bool, record: Callable[[dict], None], telemetry,
                  warm_up: bool = True, sweep_rates: tuple[float, ...] = ()) -> dict:
    """Warm up (unless not `warm_up`), then a profiled pass per cell (first: a breakdown is worth more
    than one more repeat), then `repeats` passes over the cells (repeat-major, so slow drift spreads over
    cells rather than piling into one), then the request-rate sweep, slowest rate first; stops starting
    passes at `deadline` (time.monotonic()). `record` gets each repeat's and rate's result as it lands."""
    import httpx

    from builder.measure import client as bench

    model, url = server["cfg"].model.served_name, server["url"]
    out: dict = {"repeats_done": 0, "profiles": {}, "skipped": []}
    seconds: dict[tuple[int, int], float] = {}
    async with httpx.AsyncClient(trust_env=False) as client:
        # Untimed: each server's first requests compile or autotune its prefill kernels; the longest
        # prompt length is warmed too, so a 128K cell's first repeat is not the one that pays.
        for length, conc in sorted({(BENCH_LENGTHS[0], 4), (max(n for n, _ in cells), 1)}) if warm_up else ():
            try:
                warm = await cell_prompts(client, server, length, conc, state / "ab-prompts")
                await bench.run_workload(client, url, model, cell_workload(length, conc), prompts=warm,
                                         nonce=f"ab-{length}x{conc}")
            except Exception as exc:
                log(f"ab warm-up {label} {cell_name(length, conc)}: {error_text(exc, 300)}")
        if profile:
            for length, conc in cells:
                if time.monotonic() + PROFILE_RESERVE_S > deadline:
                    out["profiles"][cell_name(length, conc)] = {"error": "time budget"}
                    continue
                try:
                    prompts = await cell_prompts(client, server, length, conc, state / "ab-prompts")
                    out["profiles"][cell_name(length, conc)] = await profile_pass(
                        client, server, length, conc, prompts, work / PROFILE_DIR / label)
                except Exception as exc:
                    out["profiles"][cell_name(length, conc)] = {"error": error_text(exc, 600)}
                got = out["profiles"][cell_name(length, conc)]
                log(f"ab profile {label} {cell_name(length, conc)}: " + json.dumps(
                    {"tokens": got.get("tokens"), "error": got.get("error"),
                     **{kind: {k: (got.get(kind) or {}).get(k) for k in ("steps", "step_us", "gpu_busy_us", "idle_us", "idle_after")}
                        for kind in ("decode", "mixed")}})[:900])
        for repeat in range(repeats):
            for length, conc in cells:
                need = seconds.get((length, conc), 0.0)
                if time.monotonic() + need > deadline:
                    out["skipped"].append({"cell": cell_name(length, conc), "repeat": repeat, "reason": "time budget"})
                    continue
                started = time.monotonic()
                try:
                    prompts = await cell_prompts(client, server, length, conc, state / "ab-prompts")
                    token = telemetry.begin()
                    res = await bench.run_workload(client, url, model, cell_workload(length, conc),
                                                   nonce=f"ab-{length}x{conc}", prompts=prompts,
                                                   output_digests=True)
                    res["telemetry"] = telemetry.end(token)
                except Exception as exc:
                    res = {"workload": cell_name(length, conc), "error": error_text(exc, 600)}
                seconds[(length, conc)] = time.monotonic() - started
                res.update(arm=label, input_len=length, concurrency=conc, repeat=repeat)
                record(res)
                log(f"ab {label} {cell_name(length, conc)} r{repeat}: ttft {res.get('median_ttft_ms', 0):.0f} ms, "
                    f"tpot {res.get('median_tpot_ms', 0):.2f} ms, ok {res.get('completed')} {res.get('error', '')}")
            out["repeats_done"] = repeat + 1
        for rate in sweep_rates:
            need = SWEEP_REQUESTS / rate + seconds.get((SWEEP_LENGTH, 1), 10.0)  # arrivals, then the last one served
            if time.monotonic() + need > deadline:
                out["skipped"].append({"sweep_rate": rate, "reason": "time budget"})
                continue
            try:
                res = await sweep_rate(client, server, rate, state=state, telemetry=telemetry)
            except Exception as exc:
                res = {"error": error_text(exc, 600)}
            res.update(arm=label, sweep_rate=rate)
            record(res)
            log(f"ab {label} sweep {rate:g}/s: goodput {res.get('goodput', 0):.2f}/s, ttft {res.get('median_ttft_ms', 0):.0f} "
                f"ms, tpot {res.get('median_tpot_ms', 0):.2f} ms {res.get('error', '')}")
    return out


async def sweep_rate(client, server: dict, rate: float, *, state: Path, telemetry) -> dict:
    """SWEEP_REQUESTS prompts of SWEEP_LENGTH tokens arriving as a seeded Poisson process of `rate` per
    second (open loop: a slow server queues them), summarized as `vllm bench serve` does, with goodput."""
    from builder.measure import client as bench

    # the SWEEP_LENGTH x SWEEP_REQUESTS cell's prompts (its last one is the warm-up's)
    prompts = await cell_prompts(client, server, SWEEP_LENGTH, SWEEP_REQUESTS, state / "ab-prompts")
    specs = [bench.RequestSpec(max_tokens=BENCH_OUTPUT_TOKENS, prompt=p) for p in prompts[:SWEEP_REQUESTS]]
    token = telemetry.begin()
    outputs, duration = await bench.run_specs_at(client, server["url"], server["cfg"].model.served_name, specs,
                                                 offsets=bench.poisson_offsets(len(specs), rate, seed=SWEEP_SEED))
    res = {"input_len": SWEEP_LENGTH, "num_prompts": len(specs), "seed": SWEEP_SEED, "slo": SWEEP_SLO,
           **bench.summarize(outputs, duration), "goodput": bench.goodput(outputs, duration, **SWEEP_SLO)}
    res["telemetry"] = telemetry.end(token)
    return res


def model_files(state: Path) -> list[Path]:
    """The checkpoint the servers load (its PLE tables map in place) and any table files built from it."""
    return page_cache.files_under(state / "model", state / "inputs")


def cold_start(state: Path) -> dict:
    """Drop the model's files from the page cache before a cold arm's server starts; what was held
    before and after, so the summary shows the start really was cold."""
    files = model_files(state)
    before = page_cache.resident(files)
    page_cache.evict(files)
    return {"files": before["files"], "bytes": before["bytes"], "resident_before": before["resident"],
            "resident_after_evict": page_cache.resident(files)["resident"]}


def measure_ab(transport, *, clock: Clock, work: Path, summary: dict, deliver: Callable[[], None], order: tuple[str, ...],
               mtp_k: int, cells_wanted: frozenset[tuple[int, int]] | None, repeats: int, profile: bool,
               started: dict, layout: str = "tp1", sweep_rates: tuple[float, ...] = ()) -> None:
    """Each arm in `order`: start its server alone, wait, measure, stop; the next arm only then. Every
    server started lands in `started` (by arm label), for the driver's last log trim."""
    import asyncio

    from benchmarks.engine.telemetry import Telemetry

    cells = grid(cells_wanted)
    ab = summary["ab"] = {"order": list(order), "mtp_k": mtp_k, "repeats": repeats, "cells": [list(c) for c in cells],
                          "profile": profile, "arms": {}, "results": [], "sweep_results": [],
                          "sweep": {"rates": list(sweep_rates), "input_len": SWEEP_LENGTH, "requests": SWEEP_REQUESTS,
                                    "seed": SWEEP_SEED, "slo": SWEEP_SLO} if sweep_rates else None}
    for i, label in enumerate(order):
        arms_left = len(order) - i
        arm: dict = {"position": i}
        ab["arms"][label] = arm
        base, suffixes = split_label(label)
        variant = variant_of(suffixes)
        profiled = profile and not variant.cold
        servers: dict = {}
        telemetry = None
        try:
            extra = ab_args(profile_dir=(work / PROFILE_DIR / label).absolute() if profiled else None)
            if variant.cold:
                arm["page_cache"] = cold_start(transport.state)
            servers = sv.start_servers(transport, work=work, extra_args=[*extra, *variant.args], extra_env=dict(variant.env),
                                       attempt="ab" + "".join(suffixes), layout=layout, graphs=True, only=(base,),
                                       mtp_k=mtp_k, max_num_seqs=max(BENCH_CONCURRENCY))
            started[label] = servers[base]
            t0 = time.monotonic()
            wait_s = clock.left() - reserved_s(arms_left=arms_left, start_s=LATER_START_S)
            states = sv.wait_servers(servers, timeout_s=max(30.0, wait_s))
            arm.update(sv.server_summary(servers, states)[base])
            if states[base] != "ready":
                log(f"ab {label}: {states[base]}")
                continue
            if variant.cold:
                arm["page_cache"]["resident_at_ready"] = page_cache.resident(model_files(transport.state))["resident"]
            arm["measure_s"] = round(arm_seconds(left=clock.left(), arms_left=arms_left, start_s=time.monotonic() - t0), 1)
            deadline = time.monotonic() + arm["measure_s"]
            telemetry = Telemetry(out=work / f"gpu-{label}.csv", sid=servers[base]["proc"].pid)

            def record(res: dict) -> None:
                ab["sweep_results" if "sweep_rate" in res else "results"].append(res)
                deliver()

            arm.update(asyncio.run(run_arm(servers[base], label, cells=cells, repeats=repeats, deadline=deadline,
                                           state=transport.state, work=work, profile=profiled, record=record,
                                           telemetry=telemetry, warm_up=not variant.cold, sweep_rates=sweep_rates)))
        except Exception as exc:
            arm["error"] = error_text(exc)
            log(f"ab {label}: {arm['error'][:300]}")
        finally:
            if telemetry is not None:
                telemetry.stop()
            sv.stop_servers(servers)
            arm["done_s"] = round(clock.elapsed(), 1)
            deliver()
