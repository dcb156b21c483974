"""PLE lookup latency on one GPU: upstream pinned UVA vs the memory-mapped table (direct, gather).

    PYTHONPATH=bundle/patches python -m benchmarks.ple.gpu_bench --engine PATCHED_TREE --out OUTDIR [--table-gib 4]

A bf16 table (256-byte rows: head_dim 128) of --table-gib GiB is written as a safetensors
checkpoint of 512 shards and mapped in place by the patched ple_mmap.py (scan_checkpoint +
map_checkpoint_table), exactly as the engine maps it; the same rows are also pinned for
upstream's _lookup_ple_embedding_from_pinned_kernel (cut unchanged from ngram_embedding.py).
Batches: decode 320 rows and prefill 16,384 rows of random ids over the whole table.

Arms, in one process:
  pinned-uva   upstream's kernel through UVA on the pinned table (the reference)
  mmap-gather  HostGather.launch: ids down, rows copied on host threads into pinned staging by a
               CUDA host function, staging up; eager (with the GIL switch interval HostGather
               sets, and with Python's default) and as a replayed CUDA graph
  mmap-direct  the direct kernel; it needs cudaDevAttrPageableMemoryAccess, which the H200 lacks,
               so here it runs only as a proxy over the mapping registered with cuMemHostRegister
               (pages pinned and GPU-visible), and is reported as such
Cold: the table file's pages dropped from the page cache (fsync + POSIX_FADV_DONTNEED) and each
batch's ids unseen; for pinned UVA, the first batches after pinning. Warm: the file read through
once (all pages cached), medians of --reps batches of fresh ids. Times are CUDA-event latencies
on the lookup's stream (launch to last byte on the GPU, host work included for the gather) and
host wall times (launch to synchronize). Also times each link of the gather chain alone, to
name what limits it. Writes ple-gpu.json and ple-gpu.md into --out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
from ple_loader import load_ple_mmap, load_upstream_pinned_kernel

ROW_BYTES = 256
KEY = "layers.0.ple.ple_embedding.ngram_embedding"
SHARDS = 512
BATCHES = {"decode": 320, "prefill": 16_384}


def write_checkpoint(folder: Path, rows: int) -> Path:
    """A safetensors file of SHARDS bf16 shards (names in safetensors' order), written in blocks."""
    folder.mkdir(parents=True, exist_ok=True)
    shard_rows = -(-rows // SHARDS)
    names = sorted(f"model.language_model.{KEY}.shard_{i}.weight" for i in range(SHARDS))
    header, offset = {}, 0
    for name in names:
        index = int(name.rsplit("shard_", 1)[1].split(".")[0])
        count = max(0, min(shard_rows, rows - index * shard_rows))
        header[name] = {"dtype": "BF16", "shape": [count, ROW_BYTES // 2], "data_offsets": [offset, offset + count * ROW_BYTES]}
        offset += count * ROW_BYTES
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = folder / "model.safetensors"
    rng = np.random.default_rng(0)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        left = offset
        while left:
            block = min(left, 256 << 20)
            handle.write(rng.integers(0, 256, size=block, dtype=np.uint8).tobytes())
            left -= block
        handle.flush()
        os.fsync(handle.fileno())
    return path


def drop_page_cache(path: Path) -> str | None:
    """Evict the file's (clean) pages; the reason when this host does not let us."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError as exc:
        return f"posix_fadvise(DONTNEED) failed: {exc}"
    finally:
        os.close(fd)
    return None


def read_through(path: Path) -> float:
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(bytearray(64 << 20)):
            pass
    return time.perf_counter() - started


def timed(fn, stream: torch.cuda.Stream) -> tuple[float, float]:
    """(CUDA-event ms on ``stream``, host wall ms to synchronize) of one call of ``fn``."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    wall = time.perf_counter()
    with torch.cuda.stream(stream):
        start.record(stream)
        fn()
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end), (time.perf_counter() - wall) * 1e3


def median_us(samples: list[tuple[float, float]]) -> dict:
    return {
        "event_us": round(statistics.median(s[0] for s in samples) * 1e3, 1),
        "wall_us": round(statistics.median(s[1] for s in samples) * 1e3, 1),
        "n": len(samples),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", type=Path, required=True, help="vllm tree with bundle/patches/series applied")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table-gib", type=float, default=4.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ple-bench"))
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--cold-reps", type=int, default=8)
    args = parser.parse_args()

    ple = load_ple_mmap(args.engine)
    pinned_kernel = load_upstream_pinned_kernel(args.engine)
    device = torch.device("cuda", 0)
    rows = int(args.table_gib * 2**30 // ROW_BYTES)
    report: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "table_gib": round(rows * ROW_BYTES / 2**30, 2),
        "rows": rows,
        "row_bytes": ROW_BYTES,
        "host_threads": ple.HOST_THREADS,
        "staging_bytes_per_table": ple.STAGING_BYTES_PER_TABLE,
    }
    pageable, host_tables = ple.pageable_memory_access(device)
    report["pageable_memory_access"] = pageable
    report["pageable_memory_access_uses_host_page_tables"] = host_tables
    report["auto_path"] = ple.choose_lookup_path("auto", device)

    started = time.perf_counter()
    path = write_checkpoint(args.work, rows)
    report["write_s"] = round(time.perf_counter() - started, 1)
    spec = ple.TableSpec("weight", torch.bfloat16, ROW_BYTES // 2)
    found, _ = ple.scan_checkpoint([path], key=KEY, specs=[spec], org_vocab_size=rows)
    mapped = ple.map_checkpoint_table(found["weight"], vocab_start=0, vocab_end=rows, key=KEY)
    report["mapping"] = mapped.description

    rng = np.random.default_rng(1)
    stream = torch.cuda.Stream()
    results: dict = {}

    def fresh_ids(count: int) -> torch.Tensor:
        return torch.from_numpy(rng.integers(0, rows, size=count, dtype=np.int64)).to(device)

    # mmap gather, cold then warm; the same HostGather serves both batch sizes.
    gather = ple.HostGather([mapped], max_rows=max(BATCHES.values()), device=device)
    report["gil_switch_interval_ms"] = sys.getswitchinterval() * 1e3  # as HostGather sets it
    outputs = {name: torch.empty((n, ROW_BYTES), dtype=torch.uint8, device=device) for name, n in BATCHES.items()}
    report["cold_note"] = drop_page_cache(path)
    for name, count in BATCHES.items():
        samples = []
        for _ in range(args.cold_reps):
            ids = fresh_ids(count)
            samples.append(timed(lambda: gather.launch(ids, [outputs[name]]), stream))
        results[("mmap-gather", name, "cold")] = median_us(samples)
    report["read_through_s"] = round(read_through(path), 2)
    for name, count in BATCHES.items():
        samples = []
        for rep in range(args.reps + 3):
            ids = fresh_ids(count)
            sample = timed(lambda: gather.launch(ids, [outputs[name]]), stream)
            if rep >= 3:
                samples.append(sample)
        results[("mmap-gather", name, "warm")] = median_us(samples)

    # mmap gather as a replayed CUDA graph (decode), warm.
    static_ids = fresh_ids(BATCHES["decode"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        gather.launch(static_ids, [outputs["decode"]])
        with torch.cuda.graph(graph, stream=stream):
            gather.launch(static_ids, [outputs["decode"]])
    torch.cuda.synchronize()
    samples = []
    for rep in range(args.reps + 3):
        static_ids.copy_(fresh_ids(BATCHES["decode"]))
        sample = timed(graph.replay, stream)
        if rep >= 3:
            samples.append(sample)
    results[("mmap-gather (CUDA graph)", "decode", "warm")] = median_us(samples)

    # Upstream pinned UVA on a pinned copy of the same rows.
    pinned = torch.empty((rows, ROW_BYTES), dtype=torch.uint8, pin_memory=True)
    for first in range(0, rows, 1 << 20):  # the same rows, copied through the mapping
        count = min(1 << 20, rows - first)
        mapped.gather(np.arange(first, first + count, dtype=np.int64), pinned.numpy()[first : first + count], ple.host_pool())

    def pinned_lookup(ids: torch.Tensor, out: torch.Tensor) -> None:
        pinned_kernel[(ids.numel(),)](pinned, ids, out, ROW_BYTES, 0, rows, BLOCK_D=ROW_BYTES)

    for name, count in BATCHES.items():
        cold = [timed(lambda: pinned_lookup(fresh_ids(count), outputs[name]), stream) for _ in range(args.cold_reps)]
        results[("pinned-uva", name, "cold")] = median_us(cold)
        samples = []
        for rep in range(args.reps + 3):
            ids = fresh_ids(count)
            sample = timed(lambda: pinned_lookup(ids, outputs[name]), stream)
            if rep >= 3:
                samples.append(sample)
        results[("pinned-uva", name, "warm")] = median_us(samples)
    ids = fresh_ids(BATCHES["prefill"])
    check_a = torch.empty((len(ids), ROW_BYTES), dtype=torch.uint8, device=device)
    check_b = torch.empty_like(check_a)
    with torch.cuda.stream(stream):
        pinned_lookup(ids, check_a)
        gather.launch(ids, [check_b])
    stream.synchronize()
    report["gather_equals_pinned"] = bool(torch.equal(check_a, check_b))

    # mmap direct: not on this GPU; a proxy over the registered mapping.
    if pageable:
        report["direct"] = "supported: measured as mmap-direct"
    libcuda = ctypes.CDLL("libcuda.so.1")
    filemap = next(s.filemap for s in mapped.segments if s is not None)
    result = libcuda.cuMemHostRegister_v2(ctypes.c_void_p(filemap.address), ctypes.c_size_t(len(filemap)), 0x01 | 0x08)
    report["direct_proxy_register_error"] = result
    if result == 0:
        try:
            for name, count in BATCHES.items():
                samples = []
                for rep in range(args.reps + 3):
                    ids = fresh_ids(count)
                    sample = timed(lambda: ple.lookup_rows_direct(mapped, ids, outputs[name]), stream)
                    if rep >= 3:
                        samples.append(sample)
                label = "mmap-direct" if pageable else "mmap-direct kernel, registered mapping (proxy)"
                results[(label, name, "warm")] = median_us(samples)
            with torch.cuda.stream(stream):
                ple.lookup_rows_direct(mapped, ids, check_b)
                pinned_lookup(ids, check_a)
            stream.synchronize()
            report["direct_equals_pinned"] = bool(torch.equal(check_a, check_b))
        finally:
            libcuda.cuMemHostUnregister(ctypes.c_void_p(filemap.address))

    # The gather chain's links alone, decode size, warm.
    count = BATCHES["decode"]
    ids = fresh_ids(count)
    host_ids = torch.empty(count, dtype=torch.int64, pin_memory=True)
    staging = torch.empty((count, ROW_BYTES), dtype=torch.uint8, pin_memory=True)
    noop = ple._HOST_FN(lambda _argument: None)
    links = {
        "ids D2H (320 x 8 B)": lambda: host_ids.copy_(ids, non_blocking=True),
        "empty host function": lambda: libcuda.cuLaunchHostFunc(ctypes.c_void_p(stream.cuda_stream), noop, None),
        "rows H2D (320 x 256 B)": lambda: outputs["decode"].copy_(staging, non_blocking=True),
    }
    libcuda.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ple._HOST_FN, ctypes.c_void_p]
    for label, fn in links.items():
        samples = [timed(fn, stream) for _ in range(args.reps + 3)][3:]
        results[(label, "decode", "link")] = median_us(samples)
    host_rows = ids.cpu().numpy()
    cpu_samples = []
    for _ in range(args.reps):
        begin = time.perf_counter()
        mapped.gather(host_rows, staging.numpy(), ple.host_pool())
        cpu_samples.append((time.perf_counter() - begin) * 1e3)
    results[("numpy gather on the host (no GPU)", "decode", "link")] = {
        "event_us": None, "wall_us": round(statistics.median(cpu_samples) * 1e3, 1), "n": len(cpu_samples)
    }

    # Where the eager gather's time goes (decode): host time of launch(), and the stream's
    # timeline between its steps; a C host function (libc free(NULL): no Python, no GIL) beside
    # the Python one; the same gather with a 0.1 ms GIL switch interval.
    raw = ctypes.CDLL("libcuda.so.1")
    raw.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    c_noop = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value
    samples = [timed(lambda: raw.cuLaunchHostFunc(ctypes.c_void_p(stream.cuda_stream), c_noop, None), stream) for _ in range(args.reps + 3)][3:]
    results[("empty C host function (no GIL)", "decode", "link")] = median_us(samples)
    launch_host, steps = [], {"ids D2H": [], "host function (gather)": [], "rows H2D": []}
    for rep in range(args.reps + 3):
        ids = fresh_ids(count)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        torch.cuda.synchronize()
        begin = time.perf_counter()
        with torch.cuda.stream(stream):
            events[0].record(stream)
            gather._host_ids[:count].copy_(ids, non_blocking=True)
            events[1].record(stream)
            libcuda.cuLaunchHostFunc(ctypes.c_void_p(stream.cuda_stream), gather._callback, count)
            events[2].record(stream)
            outputs["decode"].copy_(gather._staging[0][:count], non_blocking=True)
            events[3].record(stream)
        launched = time.perf_counter() - begin
        events[3].synchronize()
        if rep >= 3:
            launch_host.append(launched * 1e3)
            for (label, values), a, b in zip(steps.items(), events, events[1:]):
                values.append(a.elapsed_time(b))
    report["eager_decode_breakdown_us"] = {
        "host time to launch": round(statistics.median(launch_host) * 1e3, 1),
        **{label: round(statistics.median(v) * 1e3, 1) for label, v in steps.items()},
    }
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # Python's default, which HostGather lowers
    try:
        samples = [timed(lambda ids=fresh_ids(count): gather.launch(ids, [outputs["decode"]]), stream) for _ in range(args.reps + 3)][3:]
    finally:
        sys.setswitchinterval(interval)
    results[("mmap-gather, Python's default 5 ms GIL switch interval", "decode", "warm")] = median_us(samples)

    # Exposed latency when the lookup overlaps a decoder layer's GPU work, as the prefetch does:
    # a 6144x6144 bf16 matmul on the main stream, the lookup on the side stream, both waited for.
    a = torch.randn(6144, 6144, device=device, dtype=torch.bfloat16)
    main = torch.cuda.current_stream()
    for name, lookup in (
        ("pinned-uva", lambda ids: pinned_lookup(ids, outputs["decode"])),
        ("mmap-gather", lambda ids: gather.launch(ids, [outputs["decode"]])),
        ("none", None),
    ):
        samples = []
        for rep in range(args.reps + 3):
            ids = fresh_ids(count)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record(main)
            torch.mm(a, a)
            if lookup is not None:
                stream.wait_event(start)
                with torch.cuda.stream(stream):
                    lookup(ids)
                main.wait_stream(stream)
            end.record(main)
            end.synchronize()
            if rep >= 3:
                samples.append(start.elapsed_time(end))
        results[(f"6144x6144 bf16 matmul + {name} on the prefetch stream", "decode", "overlap")] = {
            "event_us": round(statistics.median(samples) * 1e3, 1), "wall_us": None, "n": len(samples)
        }

    rows_out = [
        {"arm": arm, "batch": batch, "rows": BATCHES[batch], "state": state, **values}
        for (arm, batch, state), values in results.items()
    ]
    report["results"] = rows_out
    pinned_warm = results[("pinned-uva", "decode", "warm")]["event_us"]
    gather_warm = results[("mmap-gather", "decode", "warm")]["event_us"]
    report["decode_warm_gather_over_pinned"] = round(gather_warm / pinned_warm, 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ple-gpu.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [
        f"GPU {report['gpu']}, torch {report['torch']}; table {report['table_gib']} GiB ({rows} rows x {ROW_BYTES} B) "
        f"mapped {report['mapping']}; cudaDevAttrPageableMemoryAccess={int(pageable)}, "
        f"...UsesHostPageTables={int(host_tables)}: auto path = {report['auto_path']}; host threads {ple.HOST_THREADS}.",
        "",
        "| arm | batch | rows | state | CUDA-event us | host wall us | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows_out:
        event = "-" if row["event_us"] is None else row["event_us"]
        wall = "-" if row["wall_us"] is None else row["wall_us"]
        lines.append(f"| {row['arm']} | {row['batch']} | {row['rows']} | {row['state']} | {event} | {wall} | {row['n']} |")
    lines += [
        "",
        "Eager gather, decode, median us: " + ", ".join(f"{k} {v}" for k, v in report["eager_decode_breakdown_us"].items()),
        "",
        f"warm decode, mmap gather / pinned UVA = {report['decode_warm_gather_over_pinned']}x (target 1.5x); "
        f"gather == pinned rows: {report['gather_equals_pinned']}; direct proxy == pinned: {report.get('direct_equals_pinned')}",
    ]
    (args.out / "ple-gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
