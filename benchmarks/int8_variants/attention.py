"""Int8 QSA kernel variants vs upstream fp8 and the patched int8 kernel, one process, interleaved.

The experiments behind the shipped int8 split-K kernel (evidence/kernels/qsa-int8-variants-h200.*):
head_dim halves (sd), early index/block-table loads (pf), registers-held next tile (rp), tiles,
stages and splits; each variant's output is checked against the patched kernel's (max |diff|).

    python benchmarks/int8_variants/attention.py --engine PATCHED --upstream PRISTINE --out DIR --grid tiles
    python benchmarks/int8_variants/attention.py --engine PATCHED --upstream PRISTINE --out DIR --grid regpf

--grid tiles was the first device call (sd x pf x tiles x stages), --grid regpf the second.
--grid trims (session 3) times qsa_int8_vt_kernel: V read as int16 dim pairs (vt), the decode's
-1152 folded into per-row corrections (fold), rescale only when a row max grew (lazy).
"""
import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks")); sys.path.insert(0, str(ROOT / "bundle" / "patches")); sys.path.insert(0, str(Path(__file__).parent))
import qsa_kv_layouts as B  # noqa
from qsa_cases import make_cache
from qsa_loader import OPS_RELPATH, load_file_as, load_ops_module, load_qsa_ops
import kernels as X


TRIM_FLAGS = ((0, 0, 0), (1, 0, 0), (1, 1, 0), (1, 1, 1))
TRIM_TILES = ((32, 1), (32, 2), (64, 2), (64, 4), (128, 4))


def variants(case, grid: str):
    """(sd, pf, block_n, warps, stages, target_splits, rp) candidates for one case;
    for --grid trims, ("trim", vt, fold, lazy, block_n, warps, target_splits)."""
    base = case.rows * case.kv_heads
    if grid == "trims":
        splits = (1,) if base > 2048 else (4, 8, 16) if base > 256 else (16, 32, 64)
        return [("trim", *f, bn, w, s) for f in TRIM_FLAGS for bn, w in TRIM_TILES for s in splits]
    splits = (1,) if base > 2048 else (2, 4, 8)
    if grid == "tiles":
        tiles = ((32, 1), (32, 2), (64, 2), (64, 4), (128, 4))
        return [(sd, pf, bn, w, st, s, 0) for sd, pf, (bn, w), st, s in itertools.product((0, 1), (0, 1), tiles, (2, 3), splits)]
    regpf_tiles = ((32, 1), (32, 2), (32, 4), (64, 4), (64, 8), (128, 8), (32, 8))
    out = []
    for s in splits:
        out += [(1, 1, 32, 1, 2, s, 0), (1, 0, 32, 1, 2, s, 0)]
        out += [(0, 0, bn, w, 1, s, 1) for bn, w in regpf_tiles]
    return out


def exp_launch(ops, cache, inputs, case, v):
    if v[0] == "trim":
        _, vt, fold, lazy, bn, w, target_splits = v
        sd, pf, st, rp = 1, 1, 2, 0
    else:
        sd, pf, bn, w, st, target_splits, rp = v
    _, table, t2r, logical, q, gate = inputs
    k, vc = cache.key_cache, cache.value_cache
    ks, vs = cache.kwargs["k_scale_cache"], cache.kwargs["v_scale_cache"]
    width = logical.shape[1] - 1
    tiles = triton.cdiv(width, bn)
    splits = min(target_splits, tiles)
    out = torch.empty_like(q)
    gate_v = gate.view_as(q)
    if splits > 1:
        po = torch.empty((splits, *q.shape), dtype=torch.float32, device=q.device)
        pl = torch.empty((splits, q.shape[0], q.shape[1]), dtype=torch.float32, device=q.device)
    else:
        po = pl = out
    group = q.shape[1] // k.shape[2]

    def launch():
        kernel, flags = X.qsa_int8_exp_kernel, dict(SPLIT_DIM=sd, PREFETCH=pf, REGPF=rp)
        if v[0] == "trim":
            kernel, flags = X.qsa_int8_vt_kernel, dict(VT=vt, FOLD=fold, LAZY=lazy)
        kernel[(q.shape[0], k.shape[2], splits)](
            q, k, vc, logical, table, t2r, po, pl, out, q.shape[2] ** -0.5, 1.0 / 128.0, gate_v, ks, vs,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
            logical.stride(0), table.stride(0), out.stride(0), out.stride(1), gate_v.stride(0), gate_v.stride(1),
            *ks.stride(), q.shape[0], k.shape[0], table.shape[0],
            TOPK=width, PAGE_SIZE=k.shape[1], PAGE_TABLE_WIDTH=table.shape[1], GROUP_SIZE=group, HEAD_DIM=q.shape[2],
            NUM_QUERY_HEADS=q.shape[1], NUM_SPLITS=splits, NUM_TILES=tiles, BLOCK_M=triton.next_power_of_2(group),
            BLOCK_N=bn, **flags, num_warps=w, num_stages=st)
        if splits > 1:
            ops._qsa_merge_splitk_kernel[(q.shape[0], q.shape[1])](
                po, pl, out, gate_v, out.stride(0), out.stride(1), gate_v.stride(0), gate_v.stride(1), q.shape[0],
                HEAD_DIM=q.shape[2], NUM_QUERY_HEADS=q.shape[1], NUM_SPLITS=splits,
                BLOCK_SPLITS=triton.next_power_of_2(splits), num_warps=2, num_stages=1)
        return out
    return launch


def name(v):
    if v[0] == "trim":
        return "t vt{} fold{} lazy{} {}/{}/s{}".format(*v[1:])
    return "x sd{} pf{} {}/{}/st{}/s{} rp{}".format(*v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", type=Path, required=True); p.add_argument("--upstream", type=Path, required=True)
    p.add_argument("--out", type=Path); p.add_argument("--cases", default="seed,production-prefill,decode-mtp")
    p.add_argument("--reps", type=int, default=20); p.add_argument("--shard"); p.add_argument("--jobs", type=int, default=14)
    p.add_argument("--grid", choices=("tiles", "regpf", "trims"), default="tiles")
    a = p.parse_args()
    ops = load_qsa_ops(a.engine); layout = load_ops_module("qsa_kv_layout")
    upstream = load_file_as(a.upstream / OPS_RELPATH / "qsa.py", "qsa_upstream_ops")
    wanted = a.cases.split(",")
    cases = [c for c in B.CASES if c.name in wanted]
    if not a.shard:
        t0 = time.time()
        procs = [subprocess.Popen([sys.executable, __file__, "--engine", str(a.engine), "--upstream", str(a.upstream),
                                   "--cases", a.cases, "--grid", a.grid, "--shard", f"{i}/{a.jobs}"]) for i in range(a.jobs)]
        rc = [pr.wait() for pr in procs]
        print(f"compiled in {time.time() - t0:.0f} s, rcs {rc}", flush=True)
    gen = torch.Generator().manual_seed(0)
    results = {}
    for case in cases:
        inputs = B.build_inputs(case, gen)
        if a.shard:
            kf = torch.zeros(inputs[0], B.PAGE, case.kv_heads, B.HEAD_DIM, device="cuda"); vf = kf
        else:
            kf, vf = B.fill_kv(inputs[0], case.kv_heads, gen)
        i8 = make_cache(ops, layout, "int8", kf, vf)
        vs = variants(case, a.grid)
        if a.shard:
            i, n = (int(x) for x in a.shard.split("/"))
            for v in vs[i::n]:
                try:
                    exp_launch(ops, i8, inputs, case, v)()
                except Exception as e:
                    print(f"{case.name} {name(v)}: {type(e).__name__}", flush=True)
            torch.cuda.synchronize(); del kf, vf, i8; torch.cuda.empty_cache()
            continue
        fp8_fn, fp8c = B.make_arm("fp8", ops, upstream, layout, kf, vf, inputs, case)
        int8_fn = B.make_launch(ops, i8, inputs, case)
        ref_out = torch.empty_like(inputs[4])
        _, table, t2r, logical, q, gate = inputs
        ops.qsa_sparse_paged_attention(q, i8.key_cache, i8.value_cache, logical, table, t2r, case.prefill, ref_out, output_gate=gate, **i8.kwargs)
        fns = {"fp8": fp8_fn, "int8": int8_fn}
        bf16c = None
        if a.grid == "trims":
            fns["bf16"], bf16c = B.make_arm("bf16", ops, upstream, layout, kf, vf, inputs, case)
        errs = {}
        for v in vs:
            try:
                fn = exp_launch(ops, i8, inputs, case, v)
                o = fn(); torch.cuda.synchronize()
                errs[name(v)] = float((o.float() - ref_out.float()).abs().max())
                fns[name(v)] = fn
            except Exception as e:
                print(f"{case.name} {name(v)}: {type(e).__name__} {str(e)[:100]}", flush=True)
        times = B.time_launches(fns, reps=a.reps, warmup=3)
        rows = sorted(((n, statistics.median(t), min(t)) for n, t in times.items()), key=lambda r: r[1])
        fp8_ms = statistics.median(times["fp8"]); int8_ms = statistics.median(times["int8"])
        print(f"\n{case.name}: fp8 {fp8_ms:.3f} ms, shipped int8 {int8_ms:.3f} ms; top 15:")
        for n, ms, mn in rows[:15]:
            print(f"  {n:<28} {ms:7.3f} ms  x fp8 {fp8_ms / ms:5.2f}  max|diff| {errs.get(n, 0):.2e}", flush=True)
        if a.grid == "trims":
            print(f"  best per switch set (vt fold lazy); bf16 {statistics.median(times['bf16']):.3f} ms:")
            for f in TRIM_FLAGS:
                tag = "t vt{} fold{} lazy{} ".format(*f)
                best = min((r for r in rows if r[0].startswith(tag)), key=lambda r: r[1], default=None)
                if best:
                    print(f"    {best[0]:<34} {best[1]:7.3f} ms  x fp8 {fp8_ms / best[1]:5.2f}  x shipped int8 {int8_ms / best[1]:5.2f}", flush=True)
        results[case.name] = {"fp8": fp8_ms, "int8": int8_ms, "rows": [{"name": n, "ms": ms, "ms_min": mn, "maxdiff": errs.get(n)} for n, ms, mn in rows]}
        del kf, vf, i8, fp8c, bf16c, fns; torch.cuda.empty_cache()
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "exp.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
