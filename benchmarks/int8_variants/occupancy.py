"""The shipped int8 QSA kernel under other launch options: pipeline stages and a register cap.

The profiled prefill misses are latency-bound at 12.5% occupancy: the 64/2 tile takes 219
registers a thread (evidence/kernels/qsa-aot-sm_90.json), so 4 blocks (8 warps) fit an SM
(ncu: "Block Limit Registers"). Capping registers (Triton's `maxnreg`) or dropping a pipeline
stage (less shared memory) may fit more warps; either may also cost spills or latency hiding.
Same kernel source, same inputs: every variant's output must equal the shipped launch's bit for
bit. fp8 (upstream) and the shipped int8 launch are timed alongside, CUDA-graph replay, arms
interleaved per rep, as benchmarks/qsa_grid.py. Prints each variant's registers and spills.

    python benchmarks/int8_variants/occupancy.py --engine PATCHED --upstream PRISTINE --out DIR \\
        [--variants s1,r200,s1r168,s1r128] [--contexts ...] [--rows ...] [--widths ...] [--heads ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "bundle" / "patches")]

from qsa_grid import (  # noqa: E402
    POOL_TOKENS, add_grid_arguments, build_pools, capture, make_launch, point_inputs, selected_points, time_arms,
    versions, write_json,
)
from qsa_loader import OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops  # noqa: E402

DEFAULTS = {"contexts": "32768,131072", "rows": "decode 64x5,prefill 512,prefill 2048", "widths": "2051"}
KERNEL = "_qsa_sparse_paged_int8_splitk_kernel"


def parse_variant(name: str) -> dict[str, int]:
    """'s1r168' -> {"num_stages": 1, "maxnreg": 168}; s: pipeline stages, r: register cap."""
    parts = re.fullmatch(r"(?:s(\d))?(?:r(\d+))?", name)
    if not name or parts is None:
        raise SystemExit(f"--variants: {name!r} is not s<stages>, r<registers> or both (e.g. s1r168)")
    opts = {}
    if parts.group(1):
        opts["num_stages"] = int(parts.group(1))
    if parts.group(2):
        opts["maxnreg"] = int(parts.group(2))
    return opts


class launch_options:
    """Context manager: the int8 kernel launches with `opts` overriding the wrapper's; what each
    launch compiled to (registers, spills) is kept in `self.compiled`."""

    def __init__(self, ops, opts: dict[str, int]) -> None:
        self.ops, self.opts, self.compiled = ops, opts, None

    def __enter__(self):
        kernel, outer = getattr(self.ops, KERNEL), self

        class Proxy:
            def __getitem__(self, grid):
                launcher = kernel[grid]

                def run(*args, **kwargs):
                    outer.compiled = launcher(*args, **{**kwargs, **outer.opts})
                    return outer.compiled

                return run

        self.saved = kernel
        setattr(self.ops, KERNEL, Proxy())
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.ops, KERNEL, self.saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_arguments(parser, reps=15, defaults=DEFAULTS)
    parser.add_argument("--variants", default="s1,r200,s1r168,s1r128")
    args = parser.parse_args()
    variants = {name: parse_variant(name) for name in args.variants.split(",")}

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    pools = build_pools(ops, layout, tokens=POOL_TOKENS)
    gen = torch.Generator().manual_seed(1)
    rows, registers = [], {}
    print(f"{'point':<36}{'fp8 us':>9}{'int8 us':>9}" + "".join(f"{v + ' us':>12}" for v in variants) + "  best x int8  identical")
    for point in selected_points(args):
        inputs = point_inputs(point, pools.num_blocks, gen)
        fns = {"fp8": make_launch(upstream, pools, "fp8", point, inputs), "int8": make_launch(ops, pools, "int8", point, inputs)}
        for name, opts in variants.items():
            base = make_launch(ops, pools, "int8", point, inputs)

            def run(base=base, options=launch_options(ops, opts), name=name):
                with options:
                    base()
                block_n, warps, _, splits = ops._select_config(point.rows, point.kv_heads, point.prefill, point.width, False, True)
                key = f"{name} {block_n}/{warps}/{splits} {point.q_heads}/{point.kv_heads}"
                registers[key] = (getattr(options.compiled, "n_regs", None), getattr(options.compiled, "n_spills", None))

            run.out = base.out
            fns[name] = run
        graphs = {arm: capture(fn) for arm, fn in fns.items()}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        identical = all(torch.equal(fns["int8"].out, fns[v].out) for v in variants)
        us = {arm: t["graph"] * 1e3 for arm, t in time_arms(fns, graphs, reps=args.reps, modes=("graph",)).items()}
        best = min(variants, key=lambda v: us[v])
        row = {"point": point.name, "us": us, "best": best, "best_speedup_over_int8": us["int8"] / us[best],
               "identical": identical}  # fmt: skip
        rows.append(row)
        print(f"{point.name:<36}{us['fp8']:>9.1f}{us['int8']:>9.1f}" + "".join(f"{us[v]:>12.1f}" for v in variants)
              + f"  {best} {row['best_speedup_over_int8']:.3f}  {identical}", flush=True)
        del fns, graphs, inputs
    print("registers / spills per variant and (block_n, warps):", registers)
    write_json(args.out, "qsa-int8-occupancy-h200.json",
               {"rows": rows, "variants": variants, "registers_spills": registers, "versions": versions(),
                "timing": "CUDA graph replay, per launch, median"})
    if not all(r["identical"] for r in rows):
        raise SystemExit("a launch option changed an output")


if __name__ == "__main__":
    main()
