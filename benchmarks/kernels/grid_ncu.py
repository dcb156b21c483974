"""What limits the int8 and fp8 QSA kernels at chosen grid points, profiled by ncu, not inferred.

Launch mode (under ncu, on the GPU): build the grid's pools, then launch fp8 (upstream) and int8
(shipped) once per point, in the printed order. ncu's default cache control flushes the caches
before each profiled kernel, so every number is one launch from a cold L2:

    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section Occupancy -k regex:sparse_paged \\
        python -m benchmarks.kernels.grid_ncu --engine PATCHED --upstream PRISTINE --points "NAME;NAME" \
        [--selection engine] > ncu.txt

with bundle/patches on PYTHONPATH (evidence.sh exports it).

Table mode (anywhere): ``python -m benchmarks.kernels.grid_ncu --table ncu.txt --out DIR`` writes
qsa-grid-ncu-h200.json and prints one row per (point, arm), matched to the launch order.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ORDER_TAG = "ncu-order:"
ARMS = ("fp8", "int8")
METRICS = {  # ncu metric name -> our key
    "Duration": "duration_us",
    "DRAM Throughput": "dram_pct",
    "L2 Cache Throughput": "l2_pct",
    "L1/TEX Cache Throughput": "l1_pct",
    "Compute (SM) Throughput": "sm_pct",
    "Memory Throughput": "mem_tbps",
    "L2 Hit Rate": "l2_hit_pct",
    "Achieved Occupancy": "occupancy_pct",
    "Warp Cycles Per Issued Instruction": "cycles_per_issue",
}


def launch(args) -> None:
    import torch
    from builder.patches.ops_loader import OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops

    from benchmarks.kernels.grid import POOL_TOKENS, build_pools, grid, make_launch, point_inputs, selector

    ops = load_qsa_ops(args.engine)
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    by_name = {p.name: p for p in grid()}
    wanted = [n.strip() for n in args.points.split(";") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise SystemExit(f"--points: unknown grid point(s) {unknown}; names look like 'ctx32K decode 64x5 w2051 24/2'")
    pools = build_pools(ops, load_ops_module("qsa_kv_layout"), tokens=POOL_TOKENS)
    gen = torch.Generator().manual_seed(1)
    select = selector(args.selection, args.upstream)
    modules = {"fp8": upstream, "int8": ops}
    order = []
    for name in wanted:
        point = by_name[name]
        inputs = point_inputs(point, pools.num_blocks, gen, select)
        for arm in ARMS:
            make_launch(modules[arm], pools, arm, point, inputs)()
            torch.cuda.synchronize()
            order.append([name, arm])
    print(ORDER_TAG + json.dumps(order), flush=True)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse(text: str) -> list[dict]:
    """ncu's text report -> one dict per profiled kernel (name + METRICS), in launch order."""
    kernels: list[dict] = []
    for line in text.splitlines():
        head = re.match(r"\s{2}(_\w+) \(", line)
        if head:
            kernels.append({"kernel": head.group(1)})
            continue
        if not kernels:
            continue
        cells = re.match(r"\s+(\S.*?\S)\s{2,}(\S+)?\s+([\d.,]+)\s*$", line)
        if cells and cells.group(1) in METRICS:
            key = METRICS[cells.group(1)]
            value = _number(cells.group(3))
            unit = cells.group(2) or ""
            if key == "duration_us" and unit == "ms":
                value *= 1e3
            if key == "mem_tbps" and unit == "Gbyte/s":
                value /= 1e3
            if key == "mem_tbps" and unit == "%":
                continue  # SpeedOfLight's "Memory Throughput" is a percentage; the workload section's is a rate
            kernels[-1].setdefault(key, value)
    return kernels


def table(args) -> None:
    text = args.table.read_text()
    tagged = [line for line in text.splitlines() if line.startswith(ORDER_TAG)]
    if not tagged:
        raise SystemExit(f"{args.table}: no '{ORDER_TAG}' line; was it written by this script's launch mode?")
    order = json.loads(tagged[-1][len(ORDER_TAG) :])
    kernels = parse(text)
    if len(kernels) != len(order):
        raise SystemExit(f"{args.table}: {len(kernels)} profiled kernels for {len(order)} launches; profile with -k regex:sparse_paged")
    rows = [{"point": name, "arm": arm, **kernel} for (name, arm), kernel in zip(order, kernels, strict=True)]
    print(f"{'point':<32}{'arm':>5}{'us':>9}{'DRAM %':>8}{'L2 %':>7}{'L2 hit':>8}{'SM %':>7}{'TB/s':>7}{'occ %':>7}")
    for r in rows:
        print(
            f"{r['point']:<32}{r['arm']:>5}{r.get('duration_us', 0):>9.1f}{r.get('dram_pct', 0):>8.1f}{r.get('l2_pct', 0):>7.1f}"
            f"{r.get('l2_hit_pct', 0):>8.1f}{r.get('sm_pct', 0):>7.1f}{r.get('mem_tbps', 0):>7.2f}{r.get('occupancy_pct', 0):>7.1f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "qsa-grid-ncu-h200.json.tmp"
    tmp.write_text(json.dumps({"source": args.table.name, "rows": rows}, indent=1) + "\n")
    tmp.replace(args.out / "qsa-grid-ncu-h200.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path)
    parser.add_argument("--upstream", type=Path)
    parser.add_argument("--points", default="", help="grid point names, ';'-separated")
    parser.add_argument("--selection", default="uniform", choices=("uniform", "engine", "engine-shared"),
                        help="what the rows select, as benchmarks.kernels.grid --selection")
    parser.add_argument("--table", type=Path, help="an ncu text report of launch mode: tabulate it")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    if args.table:
        table(args)
    elif args.engine and args.upstream and args.points:
        launch(args)
    else:
        parser.error("give --engine, --upstream and --points (launch under ncu), or --table FILE")


if __name__ == "__main__":
    main()
