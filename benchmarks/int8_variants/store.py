"""Quantize-on-write: patched qsa_store_int8_kv vs tokens-per-program variants, bit-exact check, interleaved.

    python benchmarks/int8_variants/store.py PATCHED rows [OUT.json]    # first device call
    python benchmarks/int8_variants/store.py PATCHED early [OUT.json]   # second: loads before the slot check
    python benchmarks/int8_variants/store.py PATCHED heads [OUT.json]   # session 3: all heads of a token per program,
                                                                         # and the same traffic without quantize math
"""
import json
import statistics
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks")); sys.path.insert(0, str(ROOT / "bundle" / "patches")); sys.path.insert(0, str(Path(__file__).parent))
import qsa_kv_layouts as B  # noqa
from qsa_cases import int8_kv_cache
from qsa_loader import load_ops_module, load_qsa_ops
import kernels as X

ops = load_qsa_ops(Path(sys.argv[1])); layout = load_ops_module("qsa_kv_layout")
copy = B.copy_bandwidth(20)
tokens, H, pages, P, D = 65536, 2, 8192, 64, 256
key = (torch.randn(tokens, H, D, device="cuda") * torch.rand(tokens, H, 1, device="cuda") * 4).to(torch.bfloat16)
value = torch.randn_like(key)
slots = torch.randperm(pages * P, device="cuda")[:tokens]
slots[::97] = -1
ref = int8_kv_cache(layout, pages, P, H)
ops.qsa_store_int8_kv(key, value, *ref[1:], slots)
moved = tokens * H * (2 * D * 2 + 2 * D + 8) + tokens * 8
fns = {"shipped": lambda: ops.qsa_store_int8_kv(key, value, *ref[1:], slots)}
res = {}
GRIDS = {
    "rows": [(b, w, 0) for b in (2, 4, 8, 16, 32) for w in (2, 4, 8)],
    "early": [(b, w, e) for b in (4, 8, 16, 32) for w in (2, 4, 8) for e in (0, 1)],
    "heads": [(b, w, q) for b in (4, 8, 16) for w in (2, 4, 8) for q in (1, 0)],
}
for bt, w, flag in GRIDS[sys.argv[2]]:
    c = int8_kv_cache(layout, pages, P, H)
    _, kc, vc, ks, vs = c

    def fn(kc=kc, vc=vc, ks=ks, vs=vs, bt=bt, w=w, flag=flag):
        args = (key, value, kc, vc, ks, vs, slots, key.stride(0), key.stride(1), value.stride(0), value.stride(1),
                kc.stride(0), kc.stride(1), kc.stride(2), *ks.stride(), tokens, kc.shape[0] * kc.shape[1])
        if sys.argv[2] == "heads":
            X.store_int8_heads_kernel[(triton.cdiv(tokens, bt),)](
                *args, PAGE_SIZE=P, HEAD_DIM=D, NUM_HEADS=H, BLOCK_T=bt, QUANT=flag, num_warps=w)
        else:
            X.store_int8_exp_kernel[(triton.cdiv(tokens, bt), H)](
                *args, PAGE_SIZE=P, HEAD_DIM=D, BLOCK_T=bt, EARLY=flag, num_warps=w)
    fn(); torch.cuda.synchronize()
    label = f"T{bt}/w{w}" + {"early": f"/e{flag}", "heads": "/heads" if flag else "/ceiling"}.get(sys.argv[2], "")
    fns[label] = fn
    res[label] = {"bit_exact": all(torch.equal(x, y) for x, y in zip(ref, c))}
times = B.time_launches(fns, reps=30, warmup=3)
print(f"copy {copy:.2f} TB/s")
for n, t in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
    ms = statistics.median(t); tb = moved / (ms * 1e-3) / 1e12
    res.setdefault(n, {}).update(ms=ms, tbps=tb, pct=100 * tb / copy)
    print(f"  {n:<10} {ms:.4f} ms {tb:.2f} TB/s {100 * tb / copy:5.1f}% exact={res[n].get('bit_exact', True)}", flush=True)
if len(sys.argv) > 3:
    Path(sys.argv[3]).write_text(json.dumps({"copy": copy, "variants": res}, indent=1))
