"""A candidate int8 QSA kernel (a copy of the shipped ops tree with qsa.py edited) against the shipped one.

At the grid's points (benchmarks/qsa_grid.py filters), on the same int8 cache and inputs, with upstream
fp8 alongside: both int8 arms pick their tiles from their own sm_90 table (the same table unless the
candidate changes it), CUDA-graph replay per launch, arms interleaved per rep. Also the rel RMS between
the two int8 outputs: a candidate that reorders arithmetic may differ by rounding, no more. A speedup
here is a reason to run the accuracy tests on the candidate (int8_unit_test.py with
QFN_QSA_PATCHED_TREE=CANDIDATE) and then the grid, not a result by itself.

    python benchmarks/int8_variants/candidate.py --engine PATCHED --candidate TREE --upstream PRISTINE --out DIR \\
        --name NAME [--bf16] [--contexts ...] [--rows ...] [--widths ...] [--heads ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "bundle" / "patches")]

from qsa_grid import (  # noqa: E402
    POOL_TOKENS, add_grid_arguments, build_pools, capture, make_launch, point_inputs, selected_points, time_arms,
    versions, write_json,
)
from qsa_loader import OPS_PACKAGE, OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops  # noqa: E402

DEFAULTS = {"contexts": "32768,131072", "rows": "decode 64x5,decode 256x5,prefill 2048"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_arguments(parser, reps=15, defaults=DEFAULTS)
    parser.add_argument("--candidate", type=Path, required=True, help="an ops tree laid out like --engine")
    parser.add_argument("--name", required=True, help="names the output, qsa-int8-candidate-NAME-h200.json")
    parser.add_argument("--bf16", action="store_true", help="time upstream bf16 alongside (the never-slower-than-bf16 goal)")
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    # Inside the shipped ops package, so its relative imports (qsa_kv_layout) resolve to the modules it did not change.
    candidate = load_file_as(args.candidate / OPS_RELPATH / "qsa.py", f"{OPS_PACKAGE}.qsa_candidate")
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    pools = build_pools(ops, layout, tokens=POOL_TOKENS)
    modules = {"fp8": (upstream, "fp8"), "int8": (ops, "int8"), "candidate": (candidate, "int8")}
    if args.bf16:
        modules = {"bf16": (upstream, "bf16"), **modules}
    gen = torch.Generator().manual_seed(1)
    rows = []
    bf16_head = f"{'bf16 us':>9}" if args.bf16 else ""
    bf16_tail = f"{'int8 x bf16':>12}{'cand. x bf16':>13}" if args.bf16 else ""
    print(f"{'point':<36}{bf16_head}{'fp8 us':>9}{'int8 us':>9}{'cand. us':>10}{'cand./int8':>11}{'cand. x fp8':>12}{bf16_tail}  rel RMS")
    for point in selected_points(args):
        inputs = point_inputs(point, pools.num_blocks, gen)
        fns = {arm: make_launch(module, pools, cache, point, inputs) for arm, (module, cache) in modules.items()}
        graphs = {arm: capture(fn) for arm, fn in fns.items()}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        a, b = fns["int8"].out.float(), fns["candidate"].out.float()
        rel_rms = float((a - b).pow(2).sum().sqrt() / a.pow(2).sum().sqrt().clamp_min(1e-30))
        us = {arm: t["graph"] * 1e3 for arm, t in time_arms(fns, graphs, reps=args.reps, modes=("graph",)).items()}
        row = {"point": point.name, "us": us, "candidate_speedup": us["int8"] / us["candidate"],
               "candidate_over_fp8": us["fp8"] / us["candidate"], "int8_over_fp8": us["fp8"] / us["int8"],
               "rel_rms_vs_shipped": rel_rms}  # fmt: skip
        if args.bf16:
            row |= {"int8_over_bf16": us["bf16"] / us["int8"], "candidate_over_bf16": us["bf16"] / us["candidate"]}
        rows.append(row)
        print(f"{point.name:<36}" + (f"{us['bf16']:>9.1f}" if args.bf16 else "") + f"{us['fp8']:>9.1f}{us['int8']:>9.1f}"
              f"{us['candidate']:>10.1f}{row['candidate_speedup']:>11.3f}{row['candidate_over_fp8']:>12.3f}"
              + (f"{row['int8_over_bf16']:>12.3f}{row['candidate_over_bf16']:>13.3f}" if args.bf16 else "")
              + f"  {rel_rms:.1e}", flush=True)
        del fns, graphs, inputs
    write_json(args.out, f"qsa-int8-candidate-{args.name}-h200.json",
               {"candidate": args.name, "rows": rows, "versions": versions(), "timing": "CUDA graph replay, per launch, median"})


if __name__ == "__main__":
    main()
