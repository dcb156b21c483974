"""The engine's K/V cache write: qsa_prepare's one launch with a bf16, fp8 and int8 main cache.

vLLM writes the main K/V cache inside qsa_prepare on every target the patch set ships
(Qwen4ExpQSAAttention.use_fused_qsa_prepare: neox RoPE, an output gate, indexer head_dim
128 with rotary_dim 64, one indexer kv head, a power-of-two compress ratio), in the same
launch as the indexer prepare and the main QK-norm/RoPE/gate copy. qsa_store_int8_kv
(benchmarks.kernels.store_write) is the unfused fallback. This times the launch the engine
runs, at store_write's sizes, slot patterns and head counts:
  none: the main slots all -1, so the launch does everything but the main cache write;
  bf16: the write is a copy of the rotated K and the V rows (the yardstick);
  fp8:  fp8_e4m3 per-tensor (one scale, a cast per element);
  int8: int8_per_token_head (absmax, scale, round, clamp per (token, kv head)).
A write's cost is its arm's time minus none's. int8 % of bf16 = bf16's time / int8's:
>= 80 means the int8 write runs at >= 80% of the speed of the copy the bf16 cache does.
Decode sizes are n requests of 5 rows (MTP k=4) at 32K context; prefill one request's
chunk from position 0. The indexer side is the harness model's (8 heads of 128, compress
ratio 4, an 8-row raw-key ring); it is the same in every arm. After timing, every int8
row and scale is checked bit for bit against quantizing the bf16 arm's row.

Timings (medians, arms interleaved per rep): graph: a CUDA graph of GRAPH_LAUNCHES
launches replayed, per launch (vLLM's decode); single: a graph holding one launch.

    PYTHONPATH=bundle/patches python -m benchmarks.kernels.prepare_write --engine PATCHED --out DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from qsa_cases import HEAD_DIM, int8_kv_cache
from qsa_reference import quantize_int8_per_row

from benchmarks.kernels.common import versions, write_json
from benchmarks.kernels.store_write import PAGE, POOL_PAGES, SIZES, TARGET_PCT, slots_for, time_pair
from builder.patches.ops_loader import load_ops_module, load_qsa_ops

ARMS = ("none", "bf16", "fp8", "int8")
TIMING = next(p for p in __doc__.split("\n\n") if p.startswith("Timings"))
MAIN_Q_HEADS = 24  # TP1; 12 at TP2, with one kv head
INDEX_HEADS, INDEX_DIM, COMPRESS_RATIO, RING = 8, 128, 4, 8
DECODE_CONTEXT = 32768
MAX_POSITION = 65536 + DECODE_CONTEXT


def requests_of(label: str, tokens: int, run: int) -> list[tuple[int, int]]:
    """(first position, rows) per request: decode steps at 32K context, prefill from 0."""
    if label.startswith("decode"):
        return [(DECODE_CONTEXT - run, run)] * (tokens // run)
    return [(0, tokens)]


class Launch:
    """One size's qsa_prepare inputs; main caches and slots vary per arm."""

    def __init__(self, prepare, requests: list[tuple[int, int]], kv_heads: int, gen: torch.Generator, *, dev="cuda"):
        i32 = dict(device=dev, dtype=torch.int32)
        self.prepare = prepare
        self.tokens = tokens = sum(n for _, n in requests)
        q_heads = MAIN_Q_HEADS // (2 // kv_heads)
        bf16 = lambda *shape: torch.randn(*shape, generator=gen).to(dev, torch.bfloat16)  # noqa: E731
        self.q, self.k = bf16(tokens, INDEX_HEADS * INDEX_DIM), bf16(tokens, INDEX_DIM)
        positions = torch.cat([torch.arange(p, p + n) for p, n in requests])
        self.positions = positions.to(dev)
        self.cos_sin = bf16(MAX_POSITION, INDEX_DIM // 2)
        self.q_norm, self.k_norm = bf16(INDEX_DIM), bf16(INDEX_DIM)
        self.q_out = torch.empty(tokens, INDEX_HEADS, INDEX_DIM, device=dev, dtype=torch.bfloat16)
        reqs = len(requests)
        self.state_cache = torch.zeros(reqs, RING, INDEX_DIM, device=dev, dtype=torch.bfloat16)
        owner = torch.cat([torch.full((n,), r) for r, (_, n) in enumerate(requests)])
        self.state_slots = (owner * RING + positions % RING).to(**i32)
        self.state_table = torch.arange(reqs).view(reqs, 1).to(**i32)
        starts = torch.tensor([0] + [n for _, n in requests]).cumsum(0)
        self.query_start = starts.to(**i32)
        self.logical = positions.to(**i32)
        comp_pages = 2 * -(-tokens // PAGE)
        self.compressed = torch.zeros(comp_pages, PAGE, INDEX_DIM, device=dev, dtype=torch.bfloat16)
        self.compressed_slots = torch.randperm(comp_pages * PAGE, generator=gen)[:tokens].to(**i32)
        work = []
        for r, (p, n) in enumerate(requests):
            groups = (p + n) // COMPRESS_RATIO - p // COMPRESS_RATIO
            work += [(r, w) for w in range(max(groups, 1))]
        self.work = torch.tensor(work).to(**i32)
        self.qkv = bf16(tokens, 2 * (q_heads + kv_heads) * HEAD_DIM) * 3
        self.main_qn, self.main_kn = bf16(HEAD_DIM), bf16(HEAD_DIM)

    def __call__(self, main_kv, slots, scales=(None, None)):
        return self.prepare.qsa_prepare(
            self.q, self.k, self.positions, self.cos_sin, self.q_norm, self.k_norm, 1e-6, self.q_out,
            self.state_cache, self.state_slots, self.state_table, self.query_start, self.logical,
            self.compressed, self.compressed_slots, self.work, compress_ratio=COMPRESS_RATIO,
            mrope_section=None, rope_pos_offset=None, main_qkv=self.qkv, main_q_norm_weight=self.main_qn,
            main_k_norm_weight=self.main_kn, main_eps=1e-6, main_kv_cache=main_kv, main_slot_mapping=slots,
            main_k_scale=1.0, main_v_scale=1.0, main_k_scale_cache=scales[0], main_v_scale_cache=scales[1],
        )  # fmt: skip


def main_caches(layout, kv_heads: int, *, pages: int = POOL_PAGES, dev="cuda") -> dict:
    """The engine's views of each main cache: [blocks, page, kv_heads, 2 * head_dim]."""
    shape = (pages, kv_heads, PAGE, 2 * HEAD_DIM)
    bf16 = torch.zeros(shape, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    fp8 = torch.zeros(shape, device=dev, dtype=torch.uint8).view(torch.float8_e4m3fn).transpose(1, 2)
    kv, key, value, ks, vs = int8_kv_cache(layout, pages, PAGE, kv_heads, device=dev)
    return {"bf16": bf16, "fp8": fp8, "int8": (kv.transpose(1, 2), key, value, ks, vs)}


def int8_matches_bf16(caches: dict, slots: torch.Tensor) -> bool:
    """Every int8 row and scale the launch wrote equals quantizing the bf16 arm's row."""
    _, key, value, ks, vs = caches["int8"]
    blk, off = slots // PAGE, slots % PAGE
    rows = caches["bf16"][blk, off]
    kq, kscale = quantize_int8_per_row(rows[..., :HEAD_DIM])
    vq, vscale = quantize_int8_per_row(rows[..., HEAD_DIM:])
    return all(
        torch.equal(a, b)
        for a, b in ((key[blk, off], kq), (ks[blk, off], kscale), (value[blk, off], vq), (vs[blk, off], vscale))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--sizes", help="comma-separated size labels (default: all of store_write's)")
    args = parser.parse_args()

    load_qsa_ops(args.engine)
    prepare, layout = load_ops_module("qsa_prepare"), load_ops_module("qsa_kv_layout")
    sizes = [s for s in SIZES if not args.sizes or s[0] in args.sizes.split(",")]
    gen = torch.Generator().manual_seed(0)
    rows = []
    print(f"qsa_prepare, one launch, us (graph of launches, per launch); target: int8 >= {TARGET_PCT:.0f}% of bf16's speed")
    print(f"{'size':<15}{'heads':>6} {'slots':<10}" + "".join(f"{a:>8}" for a in ARMS)
          + f"{'int8 %':>8}{'vs fp8':>8}{'write bf16':>11}{'write int8':>11}{'1 in graph int8/bf16':>22}  exact")  # fmt: skip
    for kv_heads in (2, 1):
        caches = main_caches(layout, kv_heads)
        kv8, *_, ks, vs = caches["int8"]
        for label, tokens, run in sizes:
            launch = Launch(prepare, requests_of(label, tokens, run), kv_heads, gen)
            for pattern in ("scattered", "paged"):
                slots = slots_for(pattern, tokens, run, gen)
                skipped = torch.full_like(slots, -1)
                fns = {
                    "none": lambda launch=launch, skipped=skipped: launch(caches["bf16"], skipped),
                    "bf16": lambda launch=launch, slots=slots: launch(caches["bf16"], slots),
                    "fp8": lambda launch=launch, slots=slots: launch(caches["fp8"], slots),
                    "int8": lambda launch=launch, slots=slots: launch(kv8, slots, (ks, vs)),
                }
                t = time_pair(fns, reps=args.reps, modes=("graph", "single"))
                torch.cuda.synchronize()
                exact = int8_matches_bf16(caches, slots)
                us = {a: 1e3 * t[a]["graph"] for a in ARMS}
                write = {a: us[a] - us["none"] for a in ("bf16", "fp8", "int8")}
                row = {
                    "size": label, "tokens": tokens, "kv_heads": kv_heads, "slots": pattern, "us": us,
                    "single_us": {a: 1e3 * t[a]["single"] for a in ARMS}, "write_us": write,
                    "int8_pct_of_bf16": 100 * us["bf16"] / us["int8"], "int8_pct_of_fp8": 100 * us["fp8"] / us["int8"],
                    "int8_bytes_exact": exact,
                }  # fmt: skip
                row["target_met"] = row["int8_pct_of_bf16"] >= TARGET_PCT
                rows.append(row)
                single = row["single_us"]["int8"] / row["single_us"]["bf16"]
                print(
                    f"{label:<15}{kv_heads:>6} {pattern:<10}" + "".join(f"{us[a]:>8.2f}" for a in ARMS)
                    + f"{row['int8_pct_of_bf16']:>8.1f}{row['int8_pct_of_fp8']:>8.1f}{write['bf16']:>11.2f}"
                    f"{write['int8']:>11.2f}{single:>22.3f}  {exact}",
                    flush=True,
                )  # fmt: skip
            del launch
        del caches, kv8, ks, vs
        torch.cuda.empty_cache()
    write_json(args.out, "qsa-int8-prepare-write-h200.json",
               {"rows": rows, "versions": versions(), "timing": TIMING})  # fmt: skip
    if not all(r["int8_bytes_exact"] for r in rows):
        raise SystemExit("int8 rows differ from quantizing the bf16 arm's rows: see the exact column")


if __name__ == "__main__":
    main()
