"""Quantize-on-write (qsa_store_int8_kv) at the sizes the engine writes, against copies of the same bytes.

Sizes: decode steps of 1x5, 8x5, 64x5 and 256x5 tokens (MTP k=4) and prefill chunks of
512, 2048, 8192 and 65536 tokens; 2 kv heads (TP1) and 1 (TP2). Slot patterns:
  scattered: every token to a random slot of the pool;
  paged:     runs of consecutive slots from random pages, as vLLM's slot_mapping lays a
             request out (5 tokens per request in decode, whole pages in prefill).
Each write moves bf16 K and V in, int8 K and V rows and two fp32 scales out, and reads
the slots. The copy it is held against is a device-to-device copy of the same number
of bytes (half read, half written), timed the same way, so a small write's launch and
tail latency count on both sides; the large-copy rate is reported too.

Timings (medians, arms interleaved per rep): graph: a CUDA graph of GRAPH_LAUNCHES
writes replayed, per write (vLLM's decode); single: a CUDA graph holding ONE write,
replayed, events around it (one small write inside a graph, launch included); events:
one eager launch with host work hidden behind a spin kernel.

    PYTHONPATH=bundle/patches python -m benchmarks.kernels.store_write --engine PATCHED --out DIR
    PYTHONPATH=bundle/patches python -m benchmarks.kernels.store_write --engine PATCHED --out DIR --sweep   # launch configs per size
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from qsa_cases import HEAD_DIM, int8_kv_cache

from benchmarks.kernels.common import HOST_COVER_CYCLES, copy_bandwidth, versions, write_json
from builder.patches.ops_loader import load_ops_module, load_qsa_ops

PAGE = 64
POOL_PAGES = 16384
SIZES = (("decode 1x5", 5, 5), ("decode 8x5", 40, 5), ("decode 64x5", 320, 5), ("decode 256x5", 1280, 5),
         ("prefill 512", 512, PAGE), ("prefill 2048", 2048, PAGE), ("prefill 8192", 8192, PAGE), ("prefill 65536", 65536, PAGE))  # fmt: skip
GRAPH_LAUNCHES = 20
TARGET_PCT = 80.0
SWEEP_CONFIGS = tuple((t, w) for t in (1, 2, 4, 8, 16) for w in (1, 2, 4, 8))


def slots_for(pattern: str, tokens: int, run: int, gen: torch.Generator) -> torch.Tensor:
    if pattern == "scattered":
        return torch.randperm(POOL_PAGES * PAGE, generator=gen)[:tokens].cuda()
    runs = -(-tokens // run)
    starts = torch.randperm(POOL_PAGES, generator=gen)[:runs] * PAGE
    return (starts[:, None] + torch.arange(run)).flatten()[:tokens].cuda()


def moved_bytes(tokens: int, heads: int) -> int:
    return tokens * heads * (2 * HEAD_DIM * 2 + 2 * HEAD_DIM + 8) + tokens * 8


def size_inputs(tokens: int, heads: int, gen: torch.Generator, *, spread: bool = False):
    """bf16 K and V rows for one write (spread: rows' magnitudes vary 0-4x, so scales differ), and
    the source and destination of the same-bytes copy it is held against."""
    key = torch.randn(tokens, heads, HEAD_DIM, generator=gen)
    if spread:
        key = key.mul(torch.rand(tokens, heads, 1, generator=gen) * 4)
    value = torch.randn(tokens, heads, HEAD_DIM, generator=gen)
    src = torch.empty(moved_bytes(tokens, heads) // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
    return key.to(torch.bfloat16).cuda(), value.to(torch.bfloat16).cuda(), src, torch.empty_like(src)


def graph_of(fn, launches: int) -> torch.cuda.CUDAGraph:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    torch.cuda.synchronize()
    return graph


def time_pair(fns: dict, *, reps: int, modes: tuple[str, ...] = ("graph", "single", "events")) -> dict:
    graphs = {name: graph_of(fn, GRAPH_LAUNCHES) for name, fn in fns.items()}
    singles = {name: graph_of(fn, 1) for name, fn in fns.items()} if "single" in modes else {}
    samples = {name: {mode: [] for mode in modes} for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            for mode in modes:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if mode == "events":
                    torch.cuda._sleep(HOST_COVER_CYCLES)
                start.record()
                if mode == "graph":
                    graphs[name].replay()
                elif mode == "single":
                    singles[name].replay()
                else:
                    fn()
                stop.record()
                stop.synchronize()
                ms = start.elapsed_time(stop)
                samples[name][mode].append(ms / GRAPH_LAUNCHES if mode == "graph" else ms)
    return {name: {mode: statistics.median(t) for mode, t in by.items()} for name, by in samples.items()}


def with_launch(ops, config: tuple[int, int], fn):
    """Run fn with the wrapper's (tokens per program, warps) forced to config: the shipped
    wrapper and kernel, only the launch choice differs."""
    shipped = ops._store_int8_launch
    ops._store_int8_launch = lambda num_tokens, num_heads: config
    try:
        return fn()
    finally:
        ops._store_int8_launch = shipped


def sweep(ops, layout, *, reps: int, out: Path) -> None:
    """Every (tokens per program, warps) at every size, graph timing, against the same-bytes
    copy and byte-checked against the shipped launch's cache."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    names = [f"T{t}/w{w}" for t, w in SWEEP_CONFIGS]
    print(f"{'size':<15}{'heads':>6} {'slots':<10}{'copy us':>8}{'shipped us':>11}{'best':>9}{'best us':>8}{'% copy':>7}  all exact")
    for heads in (2, 1):
        caches = [int8_kv_cache(layout, POOL_PAGES, PAGE, heads)[1:] for _ in range(2)]
        for label, tokens, run in SIZES:
            key, value, src, dst = size_inputs(tokens, heads, gen, spread=True)
            for pattern in ("scattered", "paged"):
                slots = slots_for(pattern, tokens, run, gen)
                ref, trial = caches
                for c in ref + trial:
                    c.zero_()
                ops.qsa_store_int8_kv(key, value, *ref, slots)
                exact = {}
                fns = {"copy": lambda src=src, dst=dst: dst.copy_(src),
                       "shipped": lambda slots=slots, key=key, value=value: ops.qsa_store_int8_kv(key, value, *trial, slots)}
                for name, config in zip(names, SWEEP_CONFIGS):
                    for c in trial:
                        c.zero_()
                    with_launch(ops, config, lambda: ops.qsa_store_int8_kv(key, value, *trial, slots))
                    exact[name] = all(torch.equal(a, b) for a, b in zip(ref, trial))
                    fns[name] = lambda config=config, slots=slots, key=key, value=value: with_launch(
                        ops, config, lambda: ops.qsa_store_int8_kv(key, value, *trial, slots))
                t = {name: by["graph"] for name, by in time_pair(fns, reps=reps, modes=("graph",)).items()}
                best = min(names, key=lambda n: t[n])
                row = {"size": label, "tokens": tokens, "kv_heads": heads, "slots": pattern, "us": {n: 1e3 * v for n, v in t.items()},
                       "exact": exact, "best": best, "pct_of_copy_best": 100 * t["copy"] / t[best],
                       "pct_of_copy_shipped": 100 * t["copy"] / t["shipped"]}  # fmt: skip
                rows.append(row)
                print(f"{label:<15}{heads:>6} {pattern:<10}{t['copy'] * 1e3:>8.2f}{t['shipped'] * 1e3:>11.2f}{best:>9}"
                      f"{t[best] * 1e3:>8.2f}{row['pct_of_copy_best']:>7.1f}  {all(exact.values())}", flush=True)
        del caches
        torch.cuda.empty_cache()
    write_json(out, "qsa-int8-store-sweep-h200.json", {"configs": names, "rows": rows, "versions": versions()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--sweep", action="store_true", help="time every launch config per size instead")
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    if args.sweep:
        sweep(ops, layout, reps=args.reps, out=args.out)
        return
    copy_tbps = copy_bandwidth(10)
    gen = torch.Generator().manual_seed(0)
    rows = []
    print(f"large copy {copy_tbps:.2f} TB/s; target: write >= {TARGET_PCT:.0f}% of a same-bytes copy's rate (graph timing)")
    print(f"{'size':<15}{'heads':>6} {'slots':<10}{'write us':>9}{'copy us':>9}{'% copy':>8}{'TB/s':>7}{'% big copy':>11}{'1 in graph us':>14}{'copy 1 in graph':>16}")
    for heads in (2, 1):
        _, key_cache, value_cache, ks, vs = int8_kv_cache(layout, POOL_PAGES, PAGE, heads)
        for label, tokens, run in SIZES:
            key, value, src, dst = size_inputs(tokens, heads, gen)
            half = src.numel()
            for pattern in ("scattered", "paged"):
                slots = slots_for(pattern, tokens, run, gen)
                fns = {
                    "write": lambda slots=slots, key=key, value=value: ops.qsa_store_int8_kv(key, value, key_cache, value_cache, ks, vs, slots),
                    "copy": lambda src=src, dst=dst: dst.copy_(src),
                }
                t = time_pair(fns, reps=args.reps)
                tbps = 2 * half / (t["write"]["graph"] * 1e-3) / 1e12
                row = {
                    "size": label, "tokens": tokens, "kv_heads": heads, "slots": pattern, "bytes_moved": 2 * half,
                    "ms": t, "pct_of_same_bytes_copy": 100 * t["copy"]["graph"] / t["write"]["graph"],
                    "tb_per_s": tbps, "pct_of_large_copy": 100 * tbps / copy_tbps,
                }  # fmt: skip
                row["target_met"] = row["pct_of_same_bytes_copy"] >= TARGET_PCT
                rows.append(row)
                print(
                    f"{label:<15}{heads:>6} {pattern:<10}{t['write']['graph'] * 1e3:>9.2f}{t['copy']['graph'] * 1e3:>9.2f}"
                    f"{row['pct_of_same_bytes_copy']:>8.1f}{tbps:>7.2f}{row['pct_of_large_copy']:>11.1f}"
                    f"{t['write']['single'] * 1e3:>14.2f}{t['copy']['single'] * 1e3:>16.2f}",
                    flush=True,
                )
        del key_cache, value_cache, ks, vs
        torch.cuda.empty_cache()
    write_json(args.out, "qsa-int8-store-h200.json", {"copy_tb_per_s": copy_tbps, "rows": rows, "versions": versions(), "timing": __doc__.split("\n\n")[2]})


if __name__ == "__main__":
    main()
