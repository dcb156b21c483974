"""The issue-13 V-bias fix costs no speed: the int8 kernel before and after it, side by side (GPU).

Arms, interleaved in one process on the same int8 cache and inputs: upstream fp8; the int8
kernel BEFORE the fix (a tree with the pre-issue-13 patch, QFN_QSA_OLD_TREE) and AFTER it,
each with its own sm_90 table, and each at the other's tile config, so kernel and table
effects separate. Cases: the earlier layouts benchmark's production prefill and MTP decode
(requests' rows INTERLEAVED, t2r = row % requests) and the same shapes with rows
contiguous per request as vLLM lays them out, plus one request's 2048-row prefill.
Timing as qsa_grid.py: graph (CUDA graph of 8 launches, per launch) and events (GPU time).

    python benchmarks/qsa_int8_fix_speed.py --engine PATCHED --old OLD_TREE --upstream PRISTINE --out DIR [--case NAME --warm-only]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bundle" / "patches"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from qsa_cases import forced_int8_config  # noqa: E402
from qsa_grid import Point, build_pools, capture, point_inputs, time_arms, versions, write_json  # noqa: E402
from qsa_loader import OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops  # noqa: E402

CASES = {  # name -> (point, rows interleaved across requests)
    "production 8x256 interleaved": (Point(32768, "prefill 8x256", 8, 256, True, 2051, 24, 2), True),
    "production 8x256 contiguous": (Point(32768, "prefill 8x256", 8, 256, True, 2051, 24, 2), False),
    "prefill 1x2048 ctx32K": (Point(32768, "prefill 2048", 1, 2048, True, 2051, 24, 2), False),
    "decode-mtp 64x5 ctx4K interleaved": (Point(4096, "decode 64x5", 64, 5, False, 2051, 24, 2), True),
    "decode-mtp 64x5 ctx4K contiguous": (Point(4096, "decode 64x5", 64, 5, False, 2051, 24, 2), False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--upstream", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--case", help="only these cases (comma list)")
    parser.add_argument("--variant", type=Path, help="a third int8 tree (a candidate kernel), timed at both tile configs")
    parser.add_argument("--pool-tokens", type=int, default=1 << 22, help="KV pool per arm (the cases' pages are spread over it)")
    parser.add_argument("--warm-only", action="store_true", help="compile and exit (fill Triton's cache)")
    args = parser.parse_args()

    new = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    old = load_file_as(args.old / OPS_RELPATH / "qsa.py", "qsa_before_fix_ops")
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    variant = load_file_as(args.variant / OPS_RELPATH / "qsa.py", "qsa_variant_ops") if args.variant else None
    pools = build_pools(new, layout, tokens=(1 << 16) if args.warm_only else args.pool_tokens)
    gen = torch.Generator().manual_seed(3)
    results = {"cases": {}}
    for name, (point, interleaved) in CASES.items():
        if args.case and name not in args.case.split(","):
            continue
        inputs = list(point_inputs(point, pools.num_blocks, gen))
        if interleaved:
            inputs[4] = (torch.arange(point.rows, device="cuda") % point.requests).to(torch.int32)
        q, gate, logical, table, t2r, _ = inputs
        configs = {m: m._select_config(point.rows, 2, point.prefill, point.width, False, True) for m in (old, new)}

        outs = {}

        def launch(module, arm, config=None, label=None):
            key, value, kwargs = pools.views(arm, point.kv_heads)
            out = outs.setdefault(label, torch.empty_like(q)) if label else torch.empty_like(q)

            def run():
                module.qsa_sparse_paged_attention(q, key, value, logical, table, t2r, point.prefill, out, output_gate=gate, **kwargs)

            if config is None:
                return run

            def forced():
                with forced_int8_config(module, config[0], config[1], config[3]):
                    run()

            return forced

        fns = {
            "fp8": launch(upstream, "fp8"),
            "int8 before fix": launch(old, "int8"),
            "int8 after fix": launch(new, "int8"),
            "int8 before fix, after's tiles": launch(old, "int8", configs[new]),
            "int8 after fix, before's tiles": launch(new, "int8", configs[old], label="after"),
        }
        if variant is not None:
            fns["variant, before's tiles"] = launch(variant, "int8", configs[old], label="variant")
            fns["variant, after's tiles"] = launch(variant, "int8", configs[new])
        graphs = {arm: capture(fn) for arm, fn in fns.items()}
        if args.warm_only:
            continue
        ms = time_arms(fns, graphs, reps=args.reps, modes=("graph", "events"))
        if variant is not None:  # same tiles, same inputs: the outputs may differ by rounding only
            a, b = outs["after"].float(), outs["variant"].float()
            ms["variant_vs_after_rel_rms"] = float((a - b).pow(2).sum().sqrt() / a.pow(2).sum().sqrt())
        results["cases"][name] = {
            "point": {**point.__dict__, "interleaved": interleaved},
            "config_before": configs[old], "config_after": configs[new], "ms": ms,
        }  # fmt: skip
        print(f"\n{name}: tiles before {configs[old][0]}/{configs[old][1]}/{configs[old][3]}, after {configs[new][0]}/{configs[new][1]}/{configs[new][3]}")
        for arm, t in ms.items():
            if not isinstance(t, dict):
                print(f"  {arm}: {t:.2e}")
                continue
            print(f"  {arm:<32} graph {t['graph'] * 1e3:8.1f} us  events {t['events'] * 1e3:8.1f} us  fp8/this {ms['fp8']['graph'] / t['graph']:.2f}", flush=True)
    if not args.warm_only:
        results["versions"] = versions()
        results["timing"] = "graph: CUDA graph of 8 launches replayed, per launch; events: CUDA events, spin kernel ahead; medians, arms interleaved"
        results["pool_tokens"] = args.pool_tokens
        suffix = "" if args.pool_tokens == 1 << 22 else f"-pool{args.pool_tokens // 1024}K"
        write_json(args.out, f"qsa-int8-fix-speed{suffix}-h200.json", results)


if __name__ == "__main__":
    main()
