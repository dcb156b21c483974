"""Three qsa_store_int8_kv calls over the layouts benchmark's quantize-on-write input, for ncu.

    python benchmarks/kernel_store_once.py PATCHED scattered|paged
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bundle" / "patches"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import qsa_kv_layouts as B  # noqa: E402
from qsa_cases import int8_kv_cache  # noqa: E402
from qsa_loader import load_ops_module, load_qsa_ops  # noqa: E402

ops = load_qsa_ops(Path(sys.argv[1]))
layout = load_ops_module("qsa_kv_layout")
key = torch.randn(65536, 2, B.HEAD_DIM, device="cuda").to(torch.bfloat16)
value = torch.randn_like(key)
_, key_cache, value_cache, ks, vs = int8_kv_cache(layout, 8192, B.PAGE, 2)
slots = B.QUANTIZE_SLOTS[sys.argv[2]](8192, 65536)
for _ in range(3):
    ops.qsa_store_int8_kv(key, value, key_cache, value_cache, ks, vs, slots)
torch.cuda.synchronize()
