"""Tables and heatmaps of a benchmarks.kernels.grid run: int8 vs fp8 and vs bf16 at every grid point (CPU).

Writes <out>/STEM.png (two heatmaps of speedup by CUDA-graph time: fp8 / int8 and bf16 / int8)
and <out>/STEM.txt (every point, the ranges per row shape and the goal per context, then the
points that miss the goal with the numbers that name their limiter), STEM being the grid JSON's
(qsa-grid-h200, or qsa-grid-engine-h200 for a --selection engine run).

    python -m benchmarks.kernels.grid_report --grid evidence/kernels/qsa-grid-h200.json --out evidence/kernels \
        [--ncu evidence/kernels/qsa-grid-ncu-h200.json evidence/kernels/qsa-grid-ncu-prefill-h200.json] \
        [--baseline OLD_GRID.json]

With --ncu (benchmarks.kernels.grid_ncu's tables), profiled misses are named from their counters,
and the rest by the inference those profiles support. With --baseline (an earlier grid, e.g.
`git show REV:evidence/kernels/qsa-grid-h200.json`, or the uniform grid beside an engine-selection
one), each row shape's median time ratio against it, for fp8 (how far the machine moved between
the runs, or what the selection pattern does to fp8) and int8.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HEAD_DIM = 256
L2_BYTES = 60 << 20  # H200: 60 MB
SMS = 132


def gathered_bytes(point: dict, arm: str) -> int:
    """K and V rows every row's selection reads (+ fp32 scales for int8)."""
    count = min(point["width"], point["context"])
    per_row = 2 * HEAD_DIM * (2 if arm == "bf16" else 1) + (8 if arm == "int8" else 0)
    return point["rows"] * count * point["kv_heads"] * per_row


#: Prefill misses by context, from the profiled prefill points (ncu: qsa-grid-ncu-h200.json and
#: qsa-grid-ncu-prefill-h200.json). At 32K both kernels sit at low occupancy with DRAM under 15%
#: and L2 under half its peak; from 128K int8 drives L2 near its peak (the range is the profiles').
PREFILL_L2_FROM = 131072
PREFILL_LATENCY = ("latency at low occupancy: rows re-gather shared tokens from L2, both kernels run at "
                   "12.5% theoretical occupancy (registers and shared memory) and int8's warps wait longer per "
                   "instruction; memory is not the bound")
PREFILL_L2 = ("L2 throughput: rows re-gather their tokens through L2, which int8 drives at {int8} of its peak "
              "at the profiled 128K-256K prefill points (fp8 {fp8}); int8 reads fp8's K/V bytes plus a scale "
              "sector, so it cannot pull much further ahead")


def prefill_l2_ranges(profiled: dict[str, dict]) -> dict[str, str]:
    """Each arm's L2 %-of-peak range over the profiled prefill points from 128K whose int8 drives
    memory (profiled_limiter's memory rule), e.g. {"int8": "81-89%", "fp8": "72-78%"}."""
    rows = [r for name, r in profiled.items() if " prefill " in name and int(name[3:name.index("K")]) * 1024 >= PREFILL_L2_FROM
            and (r["int8"]["dram_pct"] >= 70 or r["int8"]["l2_pct"] >= 80)]  # fmt: skip
    if not rows:
        return {"int8": "(no profiled point)", "fp8": "(no profiled point)"}
    return {arm: f"{min(r[arm]['l2_pct'] for r in rows):.0f}-{max(r[arm]['l2_pct'] for r in rows):.0f}%" for arm in ("int8", "fp8")}


def profiled_limiter(rows: dict[str, dict]) -> str:
    """What the counters say bounds int8 at one profiled point (ncu rows of fp8 and int8)."""
    f, i = rows["fp8"], rows["int8"]
    numbers = (f"ncu: int8 DRAM {i['dram_pct']:.0f}% L2 {i['l2_pct']:.0f}% (hit {i['l2_hit_pct']:.0f}%) "
               f"{i['cycles_per_issue']:.1f} cycles/issue; fp8 DRAM {f['dram_pct']:.0f}% L2 {f['l2_pct']:.0f}% "
               f"{f['cycles_per_issue']:.1f} cycles/issue")
    if i["duration_us"] < 30:
        why = "latency (profiled): too little work to fill the GPU"
    elif i["dram_pct"] >= 70 or i["l2_pct"] >= 80:
        why = ("memory (profiled): int8 already drives DRAM or L2 near its limit (80%+ of L2's peak), and it "
               "reads 6% more sectors than fp8 (its paired K and V scales)")
    elif i["dram_pct"] < 40:
        why = "latency at low occupancy (profiled): memory is not the bound"
    else:
        why = "neither memory nor compute saturated (profiled): latency and issue"
    return f"{why} [{numbers}]"


def limiter(point: dict, copy_tbps: float, l2_ranges: dict[str, str]) -> str:
    """What bounds int8 at a missed point, inferred from gathered bytes / time (K/V rows each
    selection reads, L2 hits included, so it can pass 100%) and, for prefill, from the profiles."""
    ms = {arm: point["ms"][arm]["graph"] for arm in ("fp8", "int8")}
    tbps = {arm: gathered_bytes(point, arm) / (ms[arm] * 1e-3) / 1e12 for arm in ms}
    pct = {arm: 100 * tbps[arm] / copy_tbps for arm in ms}
    programs = point["base_programs"] * point["int8_config"]["num_splits"]
    numbers = f"fp8 {ms['fp8'] * 1e3:.1f} us at {pct['fp8']:.0f}% of copy rate, int8 {ms['int8'] * 1e3:.1f} us at {pct['int8']:.0f}%, {programs} int8 programs"
    if ms["fp8"] * 1e3 < 30:
        why = "latency: launch, split-K merge and one gather round trip; neither arm near bandwidth"
    elif point["prefill"]:
        why = PREFILL_L2.format(**l2_ranges) if point["context"] >= PREFILL_L2_FROM else PREFILL_LATENCY
    elif pct["fp8"] >= 55:
        why = "bytes: fp8 already gathers near the memory rate; int8 gathers the same 512 B of K/V per token-head plus its paired K and V scales from one more 32 B sector (+6%), so it can at best tie"
    else:
        why = "issue-bound in both (neither near bandwidth); int8's cheaper decode gains under 15%"
    return f"{why} [{numbers}]"


def load_profiled(paths) -> dict[str, dict]:
    """Point name -> {"fp8": ncu row, "int8": ncu row}, from grid_ncu.py's JSON tables."""
    profiled: dict[str, dict] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            profiled.setdefault(row["point"], {})[row["arm"]] = row
    return profiled


def selection(grid: dict) -> str:
    """What the grid's rows select (grid.py --selection; grids before it was added: uniform)."""
    return grid.get("selection", "uniform")


def summary(grid: dict, profiled: dict[str, dict] | None = None) -> str:
    """profiled: point name -> {"fp8": ncu row, "int8": ncu row}."""
    profiled = profiled or {}
    copy = grid["copy_tb_per_s"]
    lines = [
        f"QSA grid on {grid['versions']['gpu']}, {selection(grid)} selections ({grid['timing']})",
        f"goal: {grid['goal']}",
        "",
        f"{'point':<36}{'int8 cfg':>10}{'bf16 us':>9}{'fp8 us':>9}{'int8 us':>9}{'x fp8':>7}{'x bf16':>7}"
        f"{'x fp8 ev':>9}{'x fp8 host':>11}  goal",
    ]
    for p in grid["points"]:
        cfg = p["int8_config"]
        us = {arm: p["ms"][arm]["graph"] * 1e3 for arm in ("bf16", "fp8", "int8")}
        state = "met" if p["goal_met"] else "MISS"
        if not p["goal_in_scope"]:
            state += " (fp8 <= 20 us: speed goal not in scope)" if p["goal_met"] else " (slower than bf16)"
        lines.append(
            f"{p['name']:<36}{cfg['block_n']:>4}/{cfg['num_warps']}/{cfg['num_splits']:<3}{us['bf16']:>9.1f}{us['fp8']:>9.1f}{us['int8']:>9.1f}"
            f"{p['int8_speedup_over_fp8']['graph']:>7.2f}{p['int8_speedup_over_bf16']['graph']:>7.2f}"
            f"{p['int8_speedup_over_fp8']['events']:>9.2f}{p['int8_speedup_over_fp8']['host']:>11.2f}  {state}"
        )
    misses = [p for p in grid["points"] if not p["goal_met"]]
    in_scope = [p for p in grid["points"] if p["goal_in_scope"]]
    met = [p for p in in_scope if p["goal_met"]]
    speedups = sorted(p["int8_speedup_over_fp8"]["graph"] for p in in_scope)
    lines += [
        "",
        f"{len(in_scope)} of {len(grid['points'])} points have fp8 GPU work > 20 us; int8 meets the goal at {len(met)} of them.",
        f"int8 / fp8 speedup there: min {speedups[0]:.2f}, median {speedups[len(speedups) // 2]:.2f}, max {speedups[-1]:.2f}"
        if speedups
        else "",
        f"slower than bf16 (graph timing): {sum(p['int8_speedup_over_bf16']['graph'] < 1.0 for p in grid['points'])} points, "
        f"{sum(p['int8_speedup_over_bf16']['graph'] < 1.0 and p['goal_in_scope'] for p in grid['points'])} of them with fp8 work > 20 us",
        "",
        f"misses ({len(misses)}), with what bounds them ({len(profiled)} points profiled by ncu, marked 'profiled'; the rest "
        "inferred from gathered bytes / graph time against the copy rate and, for prefill, from the prefill profiles):",
    ]
    l2_ranges = prefill_l2_ranges(profiled)
    for p in misses:
        why = profiled_limiter(profiled[p["name"]]) if p["name"] in profiled else limiter(p, copy, l2_ranges)
        lines.append(f"  {p['name']}: x fp8 {p['int8_speedup_over_fp8']['graph']:.2f}, x bf16 {p['int8_speedup_over_bf16']['graph']:.2f}; {why}")
    return "\n".join(lines) + "\n"


def _shape(point: dict) -> str:
    return f"{point['rows_label']} {point['q_heads']}/{point['kv_heads']}"


def by_shape(grid: dict) -> str:
    """Per row shape: int8's speedup ranges and its goal count; then the in-scope goal per context."""
    points = grid["points"]
    lines = ["rows          x fp8 (graph)  x bf16 (graph)  goal met"]
    for rows in dict.fromkeys(p["rows_label"] for p in points):
        ps = [p for p in points if p["rows_label"] == rows]
        fp8 = [p["int8_speedup_over_fp8"]["graph"] for p in ps]
        bf16 = [p["int8_speedup_over_bf16"]["graph"] for p in ps]
        lines.append(f"{rows:<14}{min(fp8):.2f}-{max(fp8):.2f}{'':>5}{min(bf16):.2f}-{max(bf16):.2f}{'':>6}"
                     f"{sum(p['goal_met'] for p in ps)} of {len(ps)} ({sum(p['goal_in_scope'] for p in ps)} in scope)")  # fmt: skip
    lines.append("")
    for context in dict.fromkeys(p["context"] for p in points):
        for phase, prefill in (("decode", False), ("prefill", True)):
            ps = [p for p in points if p["context"] == context and p["prefill"] == prefill and p["goal_in_scope"]]
            if ps:
                fp8 = [p["int8_speedup_over_fp8"]["graph"] for p in ps]
                lines.append(f"ctx{context // 1024}K {phase}: goal met at {sum(p['goal_met'] for p in ps)} of {len(ps)}"
                             f" in-scope points, x fp8 {min(fp8):.2f}-{max(fp8):.2f}")  # fmt: skip
    return "\n".join(lines) + "\n"


def against(grid: dict, baseline: dict) -> str:
    """Per row shape and GQA: the median (and int8's range) of this grid's CUDA-graph time over the
    baseline's at the points both measured. fp8 is unchanged code, so its ratio is the runs' drift."""
    old = {p["name"]: p for p in baseline["points"]}
    shapes: dict[str, list[tuple[float, float]]] = {}
    for p in grid["points"]:
        if p["name"] in old:
            t = {arm: p["ms"][arm]["graph"] / old[p["name"]]["ms"][arm]["graph"] for arm in ("fp8", "int8")}
            shapes.setdefault(_shape(p), []).append((t["fp8"], t["int8"]))
    lines = ["time / baseline's    fp8 median  int8 median (min-max)"]
    for shape, ratios in shapes.items():
        fp8, int8 = [r[0] for r in ratios], [r[1] for r in ratios]
        lines.append(f"{shape:<21}{statistics.median(fp8):>10.3f}{statistics.median(int8):>13.3f} "
                     f"({min(int8):.3f}-{max(int8):.3f})")  # fmt: skip
    return "\n".join(lines) + "\n"


def heatmaps(grid: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    points = grid["points"]
    row_keys = list(dict.fromkeys((p["context"], p["rows_label"]) for p in points))
    col_keys = list(dict.fromkeys((p["width"], f"{p['q_heads']}/{p['kv_heads']}") for p in points))
    fig, axes = plt.subplots(1, 2, figsize=(16, 11))
    for ax, other, title in ((axes[0], "fp8", "fp8 time / int8 time (goal >= 1.15 where fp8 > 20 us)"), (axes[1], "bf16", "bf16 time / int8 time (goal >= 1.0)")):
        data = np.full((len(row_keys), len(col_keys)), np.nan)
        for p in points:
            r = row_keys.index((p["context"], p["rows_label"]))
            c = col_keys.index((p["width"], f"{p['q_heads']}/{p['kv_heads']}"))
            data[r, c] = p["ms"][other]["graph"] / p["ms"]["int8"]["graph"]
        center = 1.15 if other == "fp8" else 1.0
        image = ax.imshow(data, cmap="RdYlGn", vmin=center - 0.5, vmax=center + 0.5, aspect="auto")
        for (r, c), value in np.ndenumerate(data):
            p = next(q for q in points if (q["context"], q["rows_label"]) == row_keys[r] and (q["width"], f"{q['q_heads']}/{q['kv_heads']}") == col_keys[c])
            mark = "" if p["goal_in_scope"] or other == "bf16" else "*"
            ax.text(c, r, f"{value:.2f}{mark}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(col_keys)), [f"w{w}\n{h}" for w, h in col_keys], fontsize=8)
        ax.set_yticks(range(len(row_keys)), [f"{c // 1024}K {label}" for c, label in row_keys], fontsize=8)
        ax.set_title(title, fontsize=10)
        fig.colorbar(image, ax=ax, shrink=0.6)
    fig.suptitle(f"int8 QSA speedup by CUDA-graph time on {grid['versions']['gpu']}, {selection(grid)} selections "
                 "(* fp8 GPU work <= 20 us)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ncu", type=Path, nargs="+", default=[],
                        help="grid_ncu.py's JSON files: name profiled misses from their counters")
    parser.add_argument("--baseline", type=Path, help="an earlier qsa-grid JSON: time ratios against it per row shape")
    args = parser.parse_args()
    grid = json.loads(args.grid.read_text())
    profiled = load_profiled(args.ncu)
    args.out.mkdir(parents=True, exist_ok=True)
    text = summary(grid, profiled) + "\n" + by_shape(grid)
    if args.baseline:
        text += f"\nagainst {args.baseline.name}:\n" + against(grid, json.loads(args.baseline.read_text()))
    (args.out / f"{args.grid.stem}.txt").write_text(text)
    print(text)
    heatmaps(grid, args.out / f"{args.grid.stem}.png")


if __name__ == "__main__":
    main()
