"""Accuracy of the QSA attention output by KV cache format, against an fp32 reference (GPU).

Runs the PATCHED kernel (loaded from a patched engine tree) over bf16, fp8
per-tensor and int8 per-(token, head) caches filled from the same K/V, and
reports the relative RMS error of each output against fp32 attention over the
original K/V (same bf16 queries). Inputs: Gaussian K/V; K with outlier
channels 20-50x larger; real K/V captured from SmolLM2-135M-Instruct
(capture_smollm2_kv.py), tiled to head_dim 256 by joining 4 consecutive layers.

    python benchmarks/qsa_int8_accuracy.py --engine PATCHED_TREE \
        --smollm2 .dev/patches/smollm2_kv.pt --out evidence/kernels/qsa-int8-accuracy.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bundle" / "patches"))

from qsa_cases import HEAD_DIM, make_cache  # noqa: E402
from qsa_loader import load_ops_module, load_qsa_ops  # noqa: E402
from qsa_reference import qsa_sparse_attention_reference  # noqa: E402

PAGE = 64
DTYPES = ("bf16", "fp8", "int8")


def causal_selection(tokens: int, width: int, device: str = "cuda"):
    """Row t attends to tokens [0, t] (at most ``width`` of the latest)."""
    rows = torch.arange(tokens, device=device)
    cols = torch.arange(width, device=device)
    first = (rows - width + 1).clamp(min=0)
    index = first[:, None] + cols[None, :]
    index = torch.where(index <= rows[:, None], index, torch.full_like(index, -1))
    count = (index >= 0).sum(dim=1, keepdim=True)
    logical = torch.cat([index, count], dim=1).to(torch.int32)
    table = torch.arange(tokens // PAGE, device=device, dtype=torch.int32)[None, :]
    return logical, table, torch.zeros(tokens, dtype=torch.int32, device=device)


def errors_for(ops, layout, q, k, v, *, width: int) -> dict[str, tuple[float, float]]:
    """(squared error sum, squared reference sum) per cache dtype for one input."""
    tokens = k.shape[0] * k.shape[1]
    logical, table, t2r = causal_selection(tokens, width)
    gate = torch.zeros_like(q)
    ref = qsa_sparse_attention_reference(q, k, v, logical, table, t2r, gate)
    sums = {}
    for dtype in DTYPES:
        cache = make_cache(ops, layout, dtype, k, v)
        out = torch.empty_like(q)
        ops.qsa_sparse_paged_attention(
            q, cache.key_cache, cache.value_cache, logical, table, t2r, True, out, output_gate=gate, **cache.kwargs
        )
        sums[dtype] = (float((out.float() - ref).pow(2).sum()), float(ref.pow(2).sum()))
    return sums


def gaussian(gen, tokens: int, *, outliers: bool):
    blocks = tokens // PAGE
    k = torch.randn(blocks, PAGE, 2, HEAD_DIM, generator=gen)
    v = torch.randn(blocks, PAGE, 2, HEAD_DIM, generator=gen)
    if outliers:
        # A few fixed channels 20-50x larger, as RoPE'd keys show.
        channels = torch.tensor([3, 77, 150, 201])
        k[..., channels] *= torch.tensor([20.0, 30.0, 40.0, 50.0])
    q = torch.randn(tokens, 24, HEAD_DIM, generator=gen).to(torch.bfloat16)
    return [(q.cuda(), k.cuda(), v.cuda())]


def smollm2_units(path: Path):
    """Per (4-layer group, kv head): K/V rows of 256 dims = 4 layers x 64, queries alike.

    SmolLM2 has 9 query heads over 3 KV heads (group 3); the kernel needs group
    12, so each unit's 3 real query heads are repeated 4 times.
    """
    data = torch.load(path)
    q, k, v = data["q"].float(), data["k"].float(), data["v"].float()
    layers, tokens, kv_heads, dim = k.shape
    tokens -= tokens % PAGE
    group = q.shape[2] // kv_heads
    units = []
    for first in range(0, layers - 3, 4):
        for head in range(kv_heads):
            kk = torch.cat([k[first + i, :tokens, head] for i in range(4)], dim=-1)
            vv = torch.cat([v[first + i, :tokens, head] for i in range(4)], dim=-1)
            qs = [torch.cat([q[first + i, :tokens, head * group + j] for i in range(4)], dim=-1) for j in range(group)]
            qq = torch.stack(qs, dim=1).repeat(1, 12 // group, 1).to(torch.bfloat16)
            units.append((qq.cuda(), kk.view(tokens // PAGE, PAGE, 1, HEAD_DIM).cuda(), vv.view(tokens // PAGE, PAGE, 1, HEAD_DIM).cuda()))
    return units, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--smollm2", type=Path)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "gaussian": (gaussian(gen, args.tokens, outliers=False), "K, V ~ N(0, 1), GQA 24/2"),
        "outlier_channels_k": (gaussian(gen, args.tokens, outliers=True), "K channels 3/77/150/201 scaled 20/30/40/50x"),
    }
    if args.smollm2 is not None:
        units, data = smollm2_units(args.smollm2)
        inputs["smollm2_135m_real"] = (units, f"{data['model']} layers {data['layers']} on {data['prompt_tokens']} prompt tokens, {len(units)} units")
    results = {}
    for name, (units, note) in inputs.items():
        totals = {d: [0.0, 0.0] for d in DTYPES}
        for q, k, v in units:
            for dtype, (err, ref) in errors_for(ops, layout, q, k, v, width=args.width).items():
                totals[dtype][0] += err
                totals[dtype][1] += ref
        results[name] = {"note": note, **{f"rel_rms_{d}": (e / r) ** 0.5 for d, (e, r) in totals.items()}}

    print(f"{'input':<22} {'bf16':>10} {'fp8/tensor':>11} {'int8/tok-head':>14} {'fp8÷int8':>9}")
    for name, row in results.items():
        ratio = row["rel_rms_fp8"] / max(row["rel_rms_int8"], 1e-30)
        row["fp8_over_int8"] = ratio
        print(f"{name:<22} {row['rel_rms_bf16']:>10.2e} {row['rel_rms_fp8']:>11.2e} {row['rel_rms_int8']:>14.2e} {ratio:>9.1f}")
    payload = {
        "metric": "relative RMS error of the gated QSA output vs fp32 attention over the original K/V",
        "width": args.width,
        "page_size": PAGE,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "gpu": torch.cuda.get_device_name(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
