"""Host cost of one QSA attention call per cache format: where int8's extra host time goes.

The grid's host-inclusive timing (one eager launch, nothing queued ahead) has int8 behind fp8 at
decode; vLLM replays decode from CUDA graphs, but prefill and eager-mode serving pay the wrapper's
host work on every layer. Per arm (bf16, fp8: upstream kernels; int8: the series), at grid points
whose GPU work is short enough that the launch queue never fills: the wall time of each call
(perf_counter around it, the queue drained every BATCH calls outside the timing), arms
interleaved per batch; then a cProfile of CALLS calls per arm, the functions by own time per call.
Both modules must already be compiled for the points (a warm-up call each does it).

    python benchmarks/int8_variants/host_cost.py --engine PATCHED --upstream PRISTINE --out DIR \\
        [--contexts 4096] [--rows "decode 1x5,decode 8x5,decode 64x5,prefill 512"] [--widths 2051]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
import timeit
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "bundle" / "patches")]

from qsa_grid import add_grid_arguments, build_pools, make_launch, point_inputs, selected_points, versions, write_json  # noqa: E402
from qsa_loader import OPS_PACKAGE, OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops  # noqa: E402

DEFAULTS = {"contexts": "4096", "rows": "decode 1x5,decode 8x5,decode 64x5,prefill 512", "widths": "2051"}
BATCH = 32  # calls between drains: 64 launches at most in the queue
CALLS = 400  # profiled calls per arm
POOL = 1 << 16


def host_times(fns: dict, *, reps: int) -> dict[str, float]:
    """Median wall microseconds per call, per arm; arms interleaved batch by batch."""
    samples: dict[str, list[float]] = {arm: [] for arm in fns}
    for _ in range(reps):
        for arm, fn in fns.items():
            torch.cuda.synchronize()
            for _ in range(BATCH):
                start = time.perf_counter()
                fn()
                samples[arm].append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return {arm: statistics.median(s) for arm, s in samples.items()}


def profile(fn, *, calls: int, top: int) -> tuple[list[dict], str]:
    """The `top` functions by own time per call over `calls` calls, as rows and as pstats text."""
    profiler = cProfile.Profile()
    for start in range(0, calls, BATCH):
        torch.cuda.synchronize()
        profiler.enable()
        for _ in range(min(BATCH, calls - start)):
            fn()
        profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler)
    rows = sorted(
        (
            {"function": f"{Path(file).name}:{line}({name})", "calls_per_call": n / calls,
             "own_us_per_call": own / calls * 1e6, "cumulative_us_per_call": cum / calls * 1e6}
            for (file, line, name), (_, n, own, cum, _) in stats.stats.items()
        ),
        key=lambda r: -r["own_us_per_call"],
    )[:top]
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return rows, text.getvalue()


def binder_costs(module, fn, *, number: int = 2000) -> dict[str, float]:
    """Microseconds per call of each launched kernel's Triton binder (argument specialization), timed
    natively on the arguments of one real call (captured by a pre-run hook)."""
    kernels = [k for k in vars(module).values() if isinstance(k, triton.runtime.jit.JITFunction)]
    seen: dict[str, tuple] = {}
    hooks = []
    for kernel in kernels:
        def hook(*args, _name=kernel.fn.__name__, **kwargs):
            seen[_name] = (args, {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")})
        kernel.pre_run_hooks.append(hook)
        hooks.append((kernel, hook))
    fn()
    torch.cuda.synchronize()
    for kernel, hook in hooks:
        kernel.pre_run_hooks.remove(hook)
    device = torch.cuda.current_device()
    costs = {}
    for kernel in kernels:
        if kernel.fn.__name__ in seen:
            args, kwargs = seen[kernel.fn.__name__]
            binder = kernel.device_caches[device][4]
            costs[kernel.fn.__name__] = timeit.timeit(lambda: binder(*args, **kwargs), number=number) / number * 1e6
    return costs


def store_launches(modules: dict, pools, point, gen) -> dict:
    """Per int8 arm, one qsa_store_int8_kv of the point's rows into the pool's int8 cache."""
    key, value, kwargs = pools.views("int8", point.kv_heads)
    rows = torch.randn(point.rows, point.kv_heads, 2, key.shape[-1], generator=gen).to(torch.bfloat16).cuda()
    slots = torch.randperm(pools.num_blocks * key.shape[1], generator=gen)[: point.rows].cuda()
    scales = kwargs["k_scale_cache"], kwargs["v_scale_cache"]
    return {
        arm: (lambda m=module: m.qsa_store_int8_kv(rows[:, :, 0], rows[:, :, 1], key, value, *scales, slots))
        for arm, module in modules.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_arguments(parser, reps=40, defaults=DEFAULTS)
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--before", type=Path, help="another patched tree: its int8 path as the arm 'int8 before'")
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    upstream = load_file_as(args.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    pools = build_pools(ops, layout, tokens=POOL)
    gen = torch.Generator().manual_seed(1)
    modules = {"bf16": upstream, "fp8": upstream, "int8": ops}
    int8_modules = {"int8": ops}
    if args.before:
        # In the ops package, so its relative import of qsa_kv_layout resolves.
        int8_modules["int8 before"] = modules["int8 before"] = load_file_as(args.before / OPS_RELPATH / "qsa.py", f"{OPS_PACKAGE}.qsa_before")
    cache_of = {arm: "int8" if arm.startswith("int8") else arm for arm in modules}
    results, texts = [], []
    header = f"{'point':34} " + " ".join(f"{arm + ' us':>14}" for arm in modules) + f" {'int8-fp8':>9} {'int8-bf16':>9}"
    if args.before:
        header += f" {'store us':>9} {'before':>9}"
    print(header)
    for point in selected_points(args):
        inputs = point_inputs(point, pools.num_blocks, gen)
        fns = {arm: make_launch(module, pools, cache_of[arm], point, inputs) for arm, module in modules.items()}
        for fn in fns.values():
            fn()
        times = host_times(fns, reps=args.reps)
        profiles = {}
        for arm, fn in fns.items():
            profiles[arm], text = profile(fn, calls=CALLS, top=args.top)
            texts.append(f"=== {point.name} {arm}: {CALLS} calls, own time per call\n{text}")
        binders = {arm: binder_costs(modules[arm], fn) for arm, fn in fns.items()}
        row = {"name": point.name, "host_us": times, "binder_us": binders, "profile": profiles}
        line = f"{point.name:34} " + " ".join(f"{times[arm]:14.1f}" for arm in modules)
        line += f" {times['int8'] - times['fp8']:+9.1f} {times['int8'] - times['bf16']:+9.1f}"
        if args.before:
            stores = store_launches(int8_modules, pools, point, gen)
            for fn in stores.values():
                fn()
            row["store_host_us"] = host_times(stores, reps=args.reps)
            line += f" {row['store_host_us']['int8']:9.1f} {row['store_host_us']['int8 before']:9.1f}"
        results.append(row)
        print(line, flush=True)
    for r in results:
        print(f"\n{r['name']}: Triton binder per kernel, us per call: " + "; ".join(
            f"{arm} " + ", ".join(f"{k} {v:.1f}" for k, v in b.items()) for arm, b in r["binder_us"].items()))
        print(f"{r['name']}: own time per call, us (top {args.top} per arm)")
        for arm in modules:
            if arm != "bf16":
                print(f"  {arm}: " + "; ".join(f"{p['function']} {p['own_us_per_call']:.1f}" for p in r["profile"][arm][:8]))
    write_json(args.out, "qsa-int8-host-cost-h200.json", {
        "method": f"perf_counter around each call, queue drained every {BATCH} calls outside the timing, median of "
                  f"{args.reps}x{BATCH} per arm, arms interleaved per batch; cProfile over {CALLS} calls per arm",
        "arms": list(modules), "before": str(args.before) if args.before else None,
        "points": results, "versions": versions(),
    })  # fmt: skip
    (args.out / "qsa-int8-host-cost-profiles-h200.txt").write_text("\n".join(texts))


if __name__ == "__main__":
    main()
