"""QSA sparse-attention kernel time by KV cache layout on one GPU, arms interleaved.

Arms: upstream bf16 and upstream fp8_e4m3 (per-tensor) kernels from the pristine
tree; the patched int8 kernel with side-tensor scales (256-byte rows); and the
same int8 kernel over 260-byte (inline-scale spacing), 384- and 512-byte rows,
where only the strides differ. Each case uses a KV pool of at least 256K tokens
(far above the 60 MB L2) and random top-k selections. Timing: CUDA events per
launch, warm-up, median of --reps launches, arms interleaved within every rep.
Also measures device copy bandwidth and int8 quantize-on-write throughput in the
same run. --sweep instead times every int8 tile candidate (BLOCK_N, warps,
splits, pipeline stages) per case, for tuning sm_90 (see int8_table.py).

    PYTHONPATH=bundle/patches python -m benchmarks.kernels.kv_layouts --engine PATCHED --upstream PRISTINE --out OUTDIR
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import torch
from qsa_cases import HEAD_DIM, int8_kv_cache, make_cache
from builder.patches.ops_loader import OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops

from benchmarks.kernels.common import copy_bandwidth, time_launches, versions, write_json

PAGE = 64
TARGETS_MS = {"production-prefill": 1.10, "seed": 0.70, "decode-mtp": 0.35}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    rows: int
    width: int
    q_heads: int
    kv_heads: int
    requests: int
    context: int  # tokens of context per request
    prefill: bool


CASES = [
    Case("seed", 2048, 1024, 24, 2, 8, 32768, True),
    Case("production-prefill", 2048, 2051, 24, 2, 8, 32768, True),
    Case("decode-mtp", 320, 2051, 24, 2, 64, 4096, False),
    Case("tp2-prefill", 2048, 2051, 12, 1, 8, 32768, True),
    Case("tp2-decode-mtp", 320, 2051, 12, 1, 64, 4096, False),
    Case("long-context-decode", 40, 2051, 24, 2, 8, 262144, False),
]
ARMS = ["bf16", "fp8", "int8", "int8-row260", "int8-row384", "int8-row512"]


def build_inputs(case: Case, gen: torch.Generator):
    pages = case.context // PAGE
    num_blocks = case.requests * pages
    perm = torch.randperm(num_blocks, generator=gen)
    table = perm.view(case.requests, pages).to(torch.int32).cuda()
    t2r = (torch.arange(case.rows) % case.requests).to(torch.int32).cuda()
    picks = torch.randint(0, case.context, (case.rows, case.width), generator=gen, dtype=torch.int32)
    logical = torch.cat([picks, torch.full((case.rows, 1), case.width, dtype=torch.int32)], dim=1).cuda()
    q = torch.randn(case.rows, case.q_heads, HEAD_DIM, generator=gen).to(torch.bfloat16).cuda()
    gate = torch.randn(case.rows, case.q_heads, HEAD_DIM, generator=gen).to(torch.bfloat16).cuda()
    return num_blocks, table, t2r, logical, q, gate


def fill_kv(num_blocks: int, kv_heads: int, gen: torch.Generator):
    """fp32 K/V for the pool, generated on the GPU in chunks (pools are GBs)."""
    k = torch.empty(num_blocks, PAGE, kv_heads, HEAD_DIM, device="cuda")
    v = torch.empty_like(k)
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    cuda_gen = torch.Generator(device="cuda").manual_seed(seed)
    k.normal_(generator=cuda_gen)
    v.normal_(generator=cuda_gen)
    return k, v


def gathered_bytes(case: Case, arm: str) -> int:
    """Useful bytes the kernel must gather: K and V rows (+ fp32 scales for int8)."""
    per_row = 2 * HEAD_DIM * (2 if arm == "bf16" else 1) + (8 if arm.startswith("int8") else 0)
    return case.rows * case.width * case.kv_heads * per_row


def make_arm(arm: str, ops, upstream, layout, k, v, inputs, case: Case):
    dtype = "int8" if arm.startswith("int8") else arm
    row_bytes = int(arm.split("row")[1]) if "row" in arm else HEAD_DIM
    cache = make_cache(ops, layout, dtype, k, v, row_bytes=row_bytes)
    module = upstream if arm in ("bf16", "fp8") else ops
    return make_launch(module, cache, inputs, case), cache


def make_launch(module, cache, inputs, case: Case):
    _, _, t2r, logical, q, gate = inputs
    table = inputs[1]
    out = torch.empty_like(q)

    def launch():
        module.qsa_sparse_paged_attention(
            q, cache.key_cache, cache.value_cache, logical, table, t2r, case.prefill, out,
            output_gate=gate, **cache.kwargs,
        )  # fmt: skip

    return launch


class _StagesOverride:
    """Stands in for the split-K kernel object: the same launch, other num_stages."""

    def __init__(self, kernel, stages: int) -> None:
        self.kernel, self.stages = kernel, stages

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args, **kwargs: launch(*args, **{**kwargs, "num_stages": self.stages})


def forced_launch(ops, launch, config: tuple[int, int, int, int]):
    """Run launch with the int8 dispatch forced to (block_n, warps, target_splits, stages)."""
    block_n, warps, splits, stages = config

    def forced():
        select, kernel = ops._select_config, ops._qsa_sparse_paged_int8_splitk_kernel
        ops._select_config = lambda rows, nkv, prefill, cols, is_fp8=False, is_int8=False: (
            block_n, warps, -(-cols // block_n), min(splits, -(-cols // block_n))
        )
        ops._qsa_sparse_paged_int8_splitk_kernel = _StagesOverride(kernel, stages)
        try:
            launch()
        finally:
            ops._select_config, ops._qsa_sparse_paged_int8_splitk_kernel = select, kernel

    return forced


QUANTIZE_SLOTS = {
    # every token to a random slot: the decode-like worst case (256-byte rows and
    # 4-byte scales land in different sectors)
    "scattered": lambda pages, tokens: torch.randperm(pages * PAGE, device="cuda")[:tokens],
    # pages in random order, tokens in order within a page: how vLLM lays out a
    # prefill's slot_mapping from its block table
    "paged": lambda pages, tokens: (
        torch.randperm(pages, device="cuda")[: tokens // PAGE, None] * PAGE + torch.arange(PAGE, device="cuda")
    ).flatten(),
}


def quantize_on_write(ops, layout, copy_tbps: float, reps: int) -> dict:
    """qsa_store_int8_kv over 65,536 tokens x 2 heads, per slot pattern."""
    tokens, kv_heads, pool_pages = 65536, 2, 8192
    key = torch.randn(tokens, kv_heads, HEAD_DIM, device="cuda").to(torch.bfloat16)
    value = torch.randn_like(key)
    _, key_cache, value_cache, ks, vs = int8_kv_cache(layout, pool_pages, PAGE, kv_heads)
    fns = {}
    for name, make_slots in QUANTIZE_SLOTS.items():
        slots = make_slots(pool_pages, tokens)
        fns[name] = lambda slots=slots: ops.qsa_store_int8_kv(key, value, key_cache, value_cache, ks, vs, slots)
    times = time_launches(fns, reps=reps, warmup=3)
    # bf16 K and V read, int8 K and V rows and two fp32 scales written, slots read
    moved = tokens * kv_heads * (2 * HEAD_DIM * 2 + 2 * HEAD_DIM + 8) + tokens * 8
    out = {}
    for name, t in times.items():
        ms = statistics.median(t)
        tbps = moved / (ms * 1e-3) / 1e12
        out[name] = {"tokens": tokens, "kv_heads": kv_heads, "ms": ms, "tokens_per_s": tokens / (ms * 1e-3), "tb_per_s": tbps, "pct_copy_bw": 100 * tbps / copy_tbps}
    return out


# Sweep-only decode shapes for the table buckets no case above falls in
# (base programs <= 24, <= 32, <= 64 and 129-256): fewer MTP requests at 32K context.
SWEEP_CASES = [
    Case("decode-mtp-2req", 10, 2051, 24, 2, 2, 32768, False),
    Case("decode-mtp-3req", 15, 2051, 24, 2, 3, 32768, False),
    Case("decode-mtp-6req", 30, 2051, 24, 2, 6, 32768, False),
    Case("decode-mtp-16req", 80, 2051, 24, 2, 16, 32768, False),
]

SWEEP_BLOCK_N = (32, 64, 128)
SWEEP_WARPS = (1, 2, 4)
SWEEP_STAGES = (1, 2, 3)


def sweep_splits(case: Case) -> tuple[int, ...]:
    """Split counts worth trying: fewer programs need more splits to fill 132 SMs."""
    base_programs = case.rows * case.kv_heads
    if base_programs > 2048:
        return (1, 2, 4)
    if base_programs > 1024:
        return (1, 2, 4, 8)
    if base_programs > 256:
        return (2, 4, 8, 16)
    return (4, 8, 16, 32, 64)


def sweep_configs(case: Case, stages: tuple[int, ...] = SWEEP_STAGES) -> list[tuple[int, int, int, int]]:
    """(block_n, warps, target_splits, stages) candidates for one case."""
    return [(bn, w, s, st) for bn in SWEEP_BLOCK_N for w in SWEEP_WARPS for s in sweep_splits(case) for st in stages]


def config_name(config: tuple[int, int, int, int]) -> str:
    return "{}/{}/{}/{}".format(*config)


def sweep_int8(case: Case, ops, layout, k, v, inputs, reps: int, *, stages: tuple[int, ...], shard: tuple[int, int] | None = None) -> list[dict]:
    """Time every candidate on one shared int8 cache, interleaved; sorted fastest first.

    With shard=(i, n), only run every n-th candidate once, to fill Triton's
    on-disk cache from n parallel processes (compiling dominates a sweep), and
    return nothing.
    """
    launch = make_launch(ops, make_cache(ops, layout, "int8", k, v), inputs, case)
    configs = sweep_configs(case, stages)
    ok = {}
    for config in configs[shard[0] :: shard[1]] if shard else configs:
        fn = forced_launch(ops, launch, config)
        try:
            fn()
            ok[config_name(config)] = fn
        except Exception as exc:  # out of resources etc.: that config is not a candidate
            print(f"  sweep {case.name} {config_name(config)}: {type(exc).__name__}", flush=True)
    torch.cuda.synchronize()
    if shard:
        return []
    times = time_launches(ok, reps=reps, warmup=2)
    rows = [
        {"block_n": bn, "num_warps": w, "target_splits": s, "num_stages": st, "ms": statistics.median(t), "ms_min": min(t)}
        for (bn, w, s, st), t in ((tuple(int(x) for x in n.split("/")), t) for n, t in times.items())
    ]
    return sorted(rows, key=lambda r: r["ms"])


def run_sweep(args, ops, layout, gen: torch.Generator, wanted: list[str]) -> None:
    """--sweep: time the int8 tile candidates per case; write qsa-int8-sweep-h200.json."""
    shard = tuple(int(x) for x in args.compile_shard.split("/")) if args.compile_shard else None
    results = {"cases": {}, "timing": f"CUDA events per launch (GPU time: a spin kernel ahead of each start event hides host launch work), 2 warm-up, median of {args.reps}, candidates interleaved per rep"}
    stages = tuple(int(x) for x in args.sweep_stages.split(","))
    for case in (c for c in CASES + SWEEP_CASES if c.name in wanted):
        inputs = build_inputs(case, gen)
        if shard:  # values are irrelevant to compiling; a pool of 4096 pages
            # specializes like the real one (block count divisible by 16) and
            # keeps many compiling processes within GPU memory for 2M-token cases.
            k = torch.zeros(min(inputs[0], 4096), PAGE, case.kv_heads, HEAD_DIM, device="cuda")
            v = k
        else:
            k, v = fill_kv(inputs[0], case.kv_heads, gen)
        rows = sweep_int8(case, ops, layout, k, v, inputs, args.reps, stages=stages, shard=shard)
        del k, v, inputs
        torch.cuda.empty_cache()
        if shard:
            print(f"compiled {case.name}", flush=True)
            continue
        shipped = ops._select_config(case.rows, case.kv_heads, case.prefill, case.width, False, True)
        results["cases"][case.name] = {
            "shape": dataclasses.asdict(case), "base_programs": case.rows * case.kv_heads,
            "config_before": {"block_n": shipped[0], "num_warps": shipped[1], "num_splits": shipped[3], "num_stages": 2},
            "candidates": rows,
        }  # fmt: skip
        print(f"\n{case.name}: {len(rows)} int8 configs, config before {shipped}; fastest (block_n/warps/splits/stages):")
        for r in rows[:8]:
            print(f"  {r['block_n']:>4}/{r['num_warps']}/{r['target_splits']:>2}/{r['num_stages']}  {r['ms']:.3f} ms", flush=True)
        write_json(args.out, "qsa-int8-sweep-h200.json", results, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--upstream", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--cases", default=",".join(c.name for c in CASES))
    parser.add_argument("--sweep", action="store_true", help="only time int8 tile candidates (tunes sm_90)")
    parser.add_argument("--sweep-stages", default=",".join(map(str, SWEEP_STAGES)), help="with --sweep, the num_stages values to try")
    parser.add_argument("--compile-shard", help="I/N: with --sweep, only compile every N-th candidate")
    parser.add_argument("--only-arm", help="run one arm of one case a few times (for ncu)")
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    gen = torch.Generator().manual_seed(0)
    wanted = args.cases.split(",")
    if args.only_arm:
        case = next(c for c in CASES if c.name == wanted[0])
        inputs = build_inputs(case, gen)
        k, v = fill_kv(inputs[0], case.kv_heads, gen)
        fn, _ = make_arm(args.only_arm, ops, upstream, layout, k, v, inputs, case)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        return
    if args.sweep:
        run_sweep(args, ops, layout, gen, wanted)
        return

    copy_tbps = copy_bandwidth(args.reps)
    print(f"copy bandwidth: {copy_tbps:.2f} TB/s (read+write)", flush=True)
    results = {"cases": {}}
    for case in (c for c in CASES if c.name in wanted):
        inputs = build_inputs(case, gen)
        k, v = fill_kv(inputs[0], case.kv_heads, gen)
        fns, caches = {}, []
        for arm in ARMS:
            fn, cache = make_arm(arm, ops, upstream, layout, k, v, inputs, case)
            fns[arm] = fn
            caches.append(cache)
        times = time_launches(fns, reps=args.reps, warmup=5)
        with_host = time_launches(fns, reps=args.reps, warmup=0, hide_host=False)
        row = {}
        for arm, t in times.items():
            ms = statistics.median(t)
            tbps = gathered_bytes(case, arm) / (ms * 1e-3) / 1e12
            row[arm] = {"ms": ms, "ms_min": min(t), "ms_max": max(t), "eff_tb_per_s": tbps, "pct_copy_bw": 100 * tbps / copy_tbps,
                        "ms_with_host": statistics.median(with_host[arm])}
        for arm in ARMS:
            row[arm]["vs_bf16"] = row["bf16"]["ms"] / row[arm]["ms"]
            row[arm]["vs_fp8"] = row["fp8"]["ms"] / row[arm]["ms"]
        config = ops._select_config(case.rows, case.kv_heads, case.prefill, case.width, False, True)
        results["cases"][case.name] = {"shape": dataclasses.asdict(case), "int8_config": config, "arms": row}
        if case.name in TARGETS_MS:
            results["cases"][case.name]["int8_target_ms"] = TARGETS_MS[case.name]
            results["cases"][case.name]["int8_target_met"] = row["int8"]["ms"] <= TARGETS_MS[case.name]
            results["cases"][case.name]["int8_target_met_with_host"] = row["int8"]["ms_with_host"] <= TARGETS_MS[case.name]
        print(f"\n{case.name}: rows={case.rows} width={case.width} GQA {case.q_heads}/{case.kv_heads} pool={inputs[0] * PAGE} tokens int8 config={config}")
        print(f"  {'arm':<13}{'ms':>8}{'TB/s':>8}{'%copy':>7}{'x bf16':>8}{'x fp8':>7}{'ms+host':>9}")
        for arm, r in row.items():
            print(f"  {arm:<13}{r['ms']:>8.3f}{r['eff_tb_per_s']:>8.2f}{r['pct_copy_bw']:>7.1f}{r['vs_bf16']:>8.2f}{r['vs_fp8']:>7.2f}{r['ms_with_host']:>9.3f}", flush=True)
        del k, v, caches, fns, inputs
        torch.cuda.empty_cache()
        write_json(args.out, "qsa-layouts-h200.json", results, indent=2)  # partial results survive a timeout

    results["quantize_on_write"] = quantize_on_write(ops, layout, copy_tbps, args.reps)
    print(f"\nquantize-on-write (65,536 tokens x 2 heads; target 80% of copy)\n  {'slots':<10}{'ms':>8}{'M tok/s':>9}{'TB/s':>7}{'%copy':>7}")
    for name, q in results["quantize_on_write"].items():
        print(f"  {name:<10}{q['ms']:>8.4f}{q['tokens_per_s'] / 1e6:>9.1f}{q['tb_per_s']:>7.2f}{q['pct_copy_bw']:>7.1f}")
    results["copy_tb_per_s"] = copy_tbps
    results["versions"] = versions()
    results["timing"] = (
        f"ms: CUDA events per launch, GPU time (a spin kernel ahead of each start event hides host launch work), 5 warm-up, "
        f"median of {args.reps}, arms interleaved per rep; ms_with_host: the same launches right after, without the spin kernel"
    )
    write_json(args.out, "qsa-layouts-h200.json", results, indent=2)
    _plot(results, args.out / "qsa-layouts-h200.png")


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(results["cases"])
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / len(ARMS)
    for i, arm in enumerate(ARMS):
        ms = [results["cases"][c]["arms"][arm]["ms"] for c in cases]
        ax.bar([x + i * width for x in range(len(cases))], ms, width, label=arm)
    for x, c in enumerate(cases):
        if c in TARGETS_MS:
            ax.hlines(TARGETS_MS[c], x - 0.05, x + 0.85, colors="k", linestyles="--")
    ax.set_xticks([x + 0.4 for x in range(len(cases))], cases, rotation=15)
    ax.set_ylabel("ms (median)")
    ax.set_yscale("log")
    ax.set_title(f"QSA sparse attention by KV layout on {results['versions']['gpu']} (dashed: int8 target)")
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
