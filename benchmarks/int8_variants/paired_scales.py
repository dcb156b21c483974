"""int8 QSA over the shipped paired scale tail against the split tail it replaced.

The engine's tail holds one (K, V) fp32 scale pair per (token, head) (qsa_kv_layout.int8_scale_strides),
so a gather reads both scales from one 32-byte sector; the split tail (all K scales, then all V) made it
read two. The profiled decode misses are memory-bound for int8 (L2 88-93%,
evidence/kernels/qsa-grid-ncu-h200.json), which is why the pairing was tried. Same kernel, same K/V
and scales (quantized by the shipped store into both layouts), only the scale strides differ: outputs
must agree bit for bit. fp8 (upstream) is timed alongside; CUDA-graph replay, arms interleaved per
rep, as benchmarks/qsa_grid.py.

    python benchmarks/int8_variants/paired_scales.py --engine PATCHED --upstream PRISTINE --out DIR \\
        [--contexts 32768,131072] [--rows "decode 64x5,decode 256x5,prefill 2048"] [--widths ...] [--heads ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "bundle" / "patches")]

from qsa_cases import HEAD_DIM, int8_kv_cache  # noqa: E402
from qsa_grid import (  # noqa: E402
    PAGE, POOL_TOKENS, Pools, add_grid_arguments, build_pools, capture, make_launch, point_inputs, selected_points,
    time_arms, versions, write_json,
)
from qsa_loader import OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops  # noqa: E402

ARMS = ("fp8", "int8s", "int8")
DEFAULTS = {"contexts": "32768,131072", "rows": "decode 64x5,decode 256x5,prefill 2048"}


def add_split(ops, layout, pools: Pools) -> None:
    """pools.caches["int8s"]: the bf16 pool quantized by the shipped store into the split tail."""
    bf16_key, bf16_value, _ = pools.caches["bf16"]
    kv_heads = bf16_key.shape[2]
    _, key, value, k_scales, v_scales = int8_kv_cache(layout, pools.num_blocks, PAGE, kv_heads, split_scales=True)
    chunk = 4096
    for start in range(0, pools.num_blocks, chunk):
        stop = min(pools.num_blocks, start + chunk)
        slots = torch.arange(start * PAGE, stop * PAGE, device="cuda")
        ops.qsa_store_int8_kv(
            bf16_key[start:stop].reshape(-1, kv_heads, HEAD_DIM), bf16_value[start:stop].reshape(-1, kv_heads, HEAD_DIM),
            key, value, k_scales, v_scales, slots,
        )  # fmt: skip
    shipped_key, _, shipped = pools.caches["int8"]
    assert torch.equal(key, shipped_key) and torch.equal(k_scales, shipped["k_scale_cache"]), "layouts hold other values"
    pools.caches["int8s"] = (key, value, {"k_scale_cache": k_scales, "v_scale_cache": v_scales})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_arguments(parser, reps=15, defaults=DEFAULTS)
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    points = selected_points(args)
    pools = build_pools(ops, layout, tokens=POOL_TOKENS)
    add_split(ops, layout, pools)
    modules = {"fp8": upstream, "int8s": ops, "int8": ops}
    gen = torch.Generator().manual_seed(1)
    rows = []
    print(f"{'point':<36}{'fp8 us':>9}{'split us':>9}{'paired us':>10}{'paired/split':>13}{'paired x fp8':>13}  identical")
    for point in points:
        inputs = point_inputs(point, pools.num_blocks, gen)
        fns = {arm: make_launch(modules[arm], pools, arm, point, inputs) for arm in ARMS}
        graphs = {arm: capture(fn) for arm, fn in fns.items()}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        identical = torch.equal(fns["int8"].out, fns["int8s"].out)
        us = {arm: t["graph"] * 1e3 for arm, t in time_arms(fns, graphs, reps=args.reps, modes=("graph",)).items()}
        row = {"point": point.name, "us": us, "paired_speedup_over_split": us["int8s"] / us["int8"],
               "paired_speedup_over_fp8": us["fp8"] / us["int8"], "identical": identical}  # fmt: skip
        rows.append(row)
        print(f"{point.name:<36}{us['fp8']:>9.1f}{us['int8s']:>9.1f}{us['int8']:>10.1f}{row['paired_speedup_over_split']:>13.3f}"
              f"{row['paired_speedup_over_fp8']:>13.3f}  {identical}", flush=True)
        del fns, graphs, inputs
    write_json(args.out, "qsa-int8-paired-scales-h200.json", {"rows": rows, "versions": versions(), "timing": "CUDA graph replay, per launch, median"})
    if not all(r["identical"] for r in rows):
        raise SystemExit("paired scales changed an output: the layouts are not equivalent")


if __name__ == "__main__":
    main()
