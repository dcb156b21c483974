"""Accuracy of the QSA attention output by KV cache format and selection width (GPU).

For each input and width, three caches (bf16, fp8 per-tensor, int8 per-(token, head))
are filled from the same K/V and run through the PATCHED kernels. Two relative RMS
errors of the gated output per cache:
  kernel: against fp32 attention over the cache's OWN dequantized K/V, so only the
          kernel's arithmetic is left (the issue-13 criterion: int8 within 1.5x of bf16);
  total:  against fp32 attention over the original K/V (quantization included).
For int8 the kernel error is also taken at every (block_n, warps, splits) any arch's
int8 table can pick, plus one split per tile shape (the whole window in one program),
and the worst is reported beside the dispatch's pick.

Inputs: flat (Gaussian Q/K/V), peaked (Q points at 4 selected keys), outlier_k (flat
with 4 key channels 20-50x), smollm2 (real SmolLM2-135M K/V/Q over causal windows,
benchmarks.kernels.capture_smollm2_kv). Rows: 16 decode rows, GQA 24/2.

    PYTHONPATH=bundle/patches python -m benchmarks.kernels.accuracy --engine PATCHED_TREE \\
        --smollm2 .dev/k13/smollm2_kv.pt --out DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from qsa_cases import (
    WINDOWS,
    forced_int8_config,
    int8_entries_and_one_split,
    make_cache,
    smollm2_window_inputs,
    window_inputs,
)
from qsa_reference import qsa_sparse_attention_reference, relative_rms_error

from benchmarks.kernels.common import write_json
from builder.patches.ops_loader import load_ops_module, load_qsa_ops

DTYPES = ("bf16", "fp8", "int8")
OUTLIER_CHANNELS = {3: 20.0, 77: 30.0, 150: 40.0, 201: 50.0}


def run(ops, cache, inputs):
    q, _, _, idx, table, t2r, gate = inputs
    out = torch.empty_like(q)
    ops.qsa_sparse_paged_attention(q, cache.key_cache, cache.value_cache, idx, table, t2r, False, out, output_gate=gate, **cache.kwargs)
    return out


def errors(ops, layout, inputs, entries) -> dict:
    q, k, v, idx, table, t2r, gate = inputs
    original = qsa_sparse_attention_reference(q, k, v, idx, table, t2r, gate)
    row = {}
    for dtype in DTYPES:
        cache = make_cache(ops, layout, dtype, k, v)
        own = qsa_sparse_attention_reference(q, cache.k_ref, cache.v_ref, idx, table, t2r, gate)
        out = run(ops, cache, inputs)
        row[dtype] = {"kernel": relative_rms_error(out, own), "total": relative_rms_error(out, original)}
        if dtype == "int8":
            per_entry = {}
            for block_n, warps, splits in entries:
                with forced_int8_config(ops, block_n, warps, splits):
                    per_entry[f"{block_n}/{warps}/{splits}"] = relative_rms_error(run(ops, cache, inputs), own)
            worst = max(per_entry, key=per_entry.get)
            row[dtype].update(kernel_worst_entry=worst, kernel_worst=per_entry[worst], kernel_by_entry=per_entry)
    row["int8_kernel_worst_over_bf16"] = row["int8"]["kernel_worst"] / row["bf16"]["kernel"]
    return row


def inputs_for(name: str, width: int, smollm2):
    if name == "smollm2":
        return smollm2_window_inputs(smollm2, width=width)
    q, k, v, *rest = window_inputs("flat" if name == "outlier_k" else name, width=width)
    if name == "outlier_k":
        for channel, factor in OUTLIER_CHANNELS.items():
            k[..., channel] *= factor
    return (q, k, v, *rest)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["inputs"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4), sharey=True)
    for ax, name in zip(axes, names):
        by_width = results["inputs"][name]["widths"]
        widths = [int(w) for w in by_width]
        ax.plot(widths, [by_width[str(w)]["bf16"]["kernel"] for w in widths], "o-", label="bf16 kernel")
        ax.plot(widths, [by_width[str(w)]["int8"]["kernel"] for w in widths], "s-", label="int8 kernel (dispatch)")
        ax.plot(widths, [by_width[str(w)]["int8"]["kernel_worst"] for w in widths], "s--", label="int8 kernel (worst table entry)")
        ax.plot(widths, [1.5 * by_width[str(w)]["bf16"]["kernel"] for w in widths], "k:", label="1.5x bf16 (bound)")
        ax.plot(widths, [by_width[str(w)]["int8"]["total"] for w in widths], "^-", alpha=0.5, label="int8 total (quantization)")
        ax.plot(widths, [by_width[str(w)]["fp8"]["total"] for w in widths], "v-", alpha=0.5, label="fp8 total (quantization)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("selection width (tokens)")
    axes[0].set_ylabel("relative RMS error of the gated output")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"QSA output error vs width on {results['gpu']}: kernel arithmetic (own dequantized K/V) and total")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--smollm2", type=Path)
    parser.add_argument("--widths", default=",".join(map(str, WINDOWS)))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    ops = load_qsa_ops(args.engine)
    layout = load_ops_module("qsa_kv_layout")
    entries = int8_entries_and_one_split(ops)
    smollm2 = torch.load(args.smollm2) if args.smollm2 else None
    names = ["flat", "peaked", "outlier_k"] + (["smollm2"] if smollm2 is not None else [])
    widths = [int(w) for w in args.widths.split(",")]
    results = {"metric": __doc__.split("\n\n")[1], "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "triton": __import__("triton").__version__, "int8_entries": {f"{b}/{w}/{s}": a for (b, w, s), a in sorted(entries.items())},
               "inputs": {}}  # fmt: skip
    if smollm2 is not None:
        results["smollm2"] = {"model": smollm2["model"], "layers": smollm2["layers"], "tokens": smollm2["prompt_tokens"]}
    print(f"{'input':<10}{'width':>6} | kernel: {'bf16':>8} {'fp8':>8} {'int8':>8} {'int8 worst (entry)':>24} {'÷bf16':>6} | total: {'bf16':>8} {'fp8':>8} {'int8':>8}")
    for name in names:
        results["inputs"][name] = {"widths": {}}
        for width in widths:
            row = errors(ops, layout, inputs_for(name, width, smollm2), sorted(entries))
            results["inputs"][name]["widths"][str(width)] = row
            print(
                f"{name:<10}{width:>6} | kernel: {row['bf16']['kernel']:>8.2e} {row['fp8']['kernel']:>8.2e} {row['int8']['kernel']:>8.2e} "
                f"{row['int8']['kernel_worst']:>10.2e} ({row['int8']['kernel_worst_entry']:>9}) {row['int8_kernel_worst_over_bf16']:>6.2f} | "
                f"total: {row['bf16']['total']:>8.2e} {row['fp8']['total']:>8.2e} {row['int8']['total']:>8.2e}",
                flush=True,
            )
    write_json(args.out, "qsa-int8-accuracy.json", results)
    plot(results, args.out / "qsa-int8-accuracy.png")


if __name__ == "__main__":
    main()
