"""Write the measured-best int8 sm_90 tile entries into a patched ops/qsa.py.

Reads a sweep (`grid.py --sweep`) and, for every base_programs bucket of
`_SM90_INT8_TABLE` that a swept case falls in, picks the (block_n,
target_splits, num_warps) with the least summed slowdown over that bucket's
cases (each against its own fastest candidate). Cases are first grouped by
base_programs: where two neighbouring groups of one bucket have different
bests, the bucket is split at the roundest number between them. Then, within a
bucket, a selection width whose own best beats the bucket's shared best by at
least MIN_WIDTH_GAIN per case gets its own entry (split at the roundest width
between neighbouring widths; a bucket always ends in a None width). Only
num_stages 2 is shippable (the launch fixes it); the best of any stage count is
reported beside it. Buckets no swept case falls in are left as they are. Last, the
whole table is kept as it was unless the new one gains at least MIN_TABLE_GAIN per
case (mean slowdown over every swept case): the dispatch cannot see the context, so
re-sweeps trade one context's noise against another's (a re-sweep of the shipped kernel would have
moved 5 buckets for 0.2% per case, and the grid on the moved table gained nothing).

    python -m benchmarks.kernels.int8_table --sweep SWEEP.json --qsa PATCHED/.../ops/qsa.py --out OUTDIR
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

SHIPPED_STAGES = 2
#: A width keeps its own entry only if it gains this much per case (mean slowdown): below it, a
#: split would chase the sweep's noise.
MIN_WIDTH_GAIN = 0.01
#: The new table replaces the old one only if it gains this much per case (mean slowdown over
#: every swept case); below it the sweep moves buckets on noise.
MIN_TABLE_GAIN = 0.005
TABLE_RE = re.compile(r"^_SM90_INT8_TABLE = \(\n.*?^\)\n", re.S | re.M)

Config = tuple[int, int, int]
#: base_programs limit -> [(width limit, config)], both in table order; None is open-ended.
Table = dict


def read_table(source: str) -> Table:
    match = TABLE_RE.search(source)
    if match is None:
        raise SystemExit("no _SM90_INT8_TABLE literal in the given qsa.py")
    table: Table = {}
    for bp_limit, width_limit, config in ast.literal_eval(match.group(0).split("=", 1)[1].strip()):
        table.setdefault(bp_limit, []).append((width_limit, tuple(config)))
    return table


def bucket_of(table: Table, base_programs: int) -> int | None:
    """The base_programs limit whose bucket holds ``base_programs``."""
    return next(limit for limit in table if limit is None or base_programs <= limit)


def shippable(case: dict) -> dict[Config, float]:
    """(block_n, target_splits, num_warps) -> ms, at the launch's num_stages."""
    return {(r["block_n"], r["target_splits"], r["num_warps"]): r["ms"] for r in case["candidates"] if r["num_stages"] == SHIPPED_STAGES}


def slowdown(cases: list[dict], config: Config) -> float:
    """Summed time over each case's fastest shippable candidate."""
    return sum((c := shippable(case))[config] / min(c.values()) for case in cases)


def best_of(cases: list[dict]) -> Config:
    """The shippable candidate with the least summed slowdown over ``cases``."""
    common = set.intersection(*(set(shippable(c)) for c in cases))
    return min(common, key=lambda cfg: (slowdown(cases, cfg), cfg))


def round_limit(lo: int, hi: int) -> int:
    """The roundest integer in [lo, hi): most trailing zero bits, then largest."""
    step = 1 << (hi - 1).bit_length()
    while (hi - 1) // step * step < lo:
        step >>= 1
    return (hi - 1) // step * step


def split_buckets(sweep: dict, table: Table) -> Table:
    """Table with a new base_programs limit between swept base_programs whose bests differ."""
    table = dict(table)
    groups: dict[int, list[dict]] = {}
    for case in sweep["cases"].values():
        groups.setdefault(case["base_programs"], []).append(case)
    ordered = sorted(groups)
    for lo, hi in zip(ordered, ordered[1:], strict=False):
        if bucket_of(table, lo) != bucket_of(table, hi) or best_of(groups[lo]) == best_of(groups[hi]):
            continue
        limit, owner = round_limit(lo, hi), bucket_of(table, hi)
        items = list(table.items())
        at = next(i for i, (key, _) in enumerate(items) if key == owner)
        items.insert(at, (limit, list(table[owner])))
        table = dict(items)
    return table


def width_entries(cases: list[dict]) -> list[tuple[int | None, Config]]:
    """One bucket's [(width limit, config)]: the shared best, and a width's own where it gains."""
    shared = best_of(cases)
    by_width: dict[int, list[dict]] = {}
    for case in cases:
        by_width.setdefault(case["shape"]["width"], []).append(case)
    choice = {}
    for width, group in by_width.items():
        own = best_of(group)
        gain = (slowdown(group, shared) - slowdown(group, own)) / len(group)
        choice[width] = own if gain >= MIN_WIDTH_GAIN else shared
    widths = sorted(choice)
    entries: list[tuple[int | None, Config]] = []
    for lo, hi in zip(widths, widths[1:], strict=False):
        if choice[lo] != choice[hi]:
            entries.append((round_limit(lo, hi), choice[lo]))
    entries.append((None, choice[widths[-1]]))
    return entries


def entry_at(entries: list[tuple[int | None, Config]], width: int) -> tuple[int | None, Config]:
    """The (width limit, config) of one bucket that ``width`` falls in."""
    return next((limit, cfg) for limit, cfg in entries if limit is None or width <= limit)


def pick(sweep: dict, table: Table) -> tuple[Table, dict]:
    """New table and, per (base_programs, width) entry in table order, the choice with its per-case numbers."""
    table = split_buckets(sweep, table)
    by_bucket: dict[int | None, list[str]] = {}
    for name, case in sweep["cases"].items():
        by_bucket.setdefault(bucket_of(table, case["base_programs"]), []).append(name)
    new, report = dict(table), {}
    for bp_limit in table:
        if bp_limit not in by_bucket:
            continue
        cases = {name: sweep["cases"][name] for name in by_bucket[bp_limit]}
        new[bp_limit] = entries = width_entries(list(cases.values()))
        for width_limit, choice in entries:  # width order, the open width last
            report[f"bp<={bp_limit} w<={width_limit}"] = {
                "base_programs_limit": bp_limit, "width_limit": width_limit, "after": list(choice), "cases": {}}
        for name, case in cases.items():
            width = case["shape"]["width"]
            width_limit, choice = entry_at(entries, width)
            before = entry_at(table[bp_limit], width)[1]
            report[f"bp<={bp_limit} w<={width_limit}"]["cases"][name] = {
                "before": list(before),
                "ms_before": shippable(case).get(before),
                "ms_after": shippable(case)[choice],
                "best_any_stages": case["candidates"][0],
            }
    return new, report


def config_at(table: Table, base_programs: int, width: int) -> Config:
    """What the patched dispatch picks: the first bucket, then the first width, that hold the case."""
    return entry_at(table[bucket_of(table, base_programs)], width)[1]


def mean_slowdown(sweep: dict, table: Table) -> float:
    """Mean over the swept cases of each one's time at ``table``'s pick over its fastest (inf if unswept)."""
    total = 0.0
    for case in sweep["cases"].values():
        times = shippable(case)
        total += times.get(config_at(table, case["base_programs"], case["shape"]["width"]), float("inf")) / min(times.values())
    return total / len(sweep["cases"])


def render(table: Table) -> str:
    rows = "".join(f"    ({bp}, {width}, {tuple(cfg)}),\n" for bp, entries in table.items() for width, cfg in entries)
    return "_SM90_INT8_TABLE = (\n" + rows + ")\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, required=True)
    parser.add_argument("--qsa", type=Path, required=True, help="patched ops/qsa.py, rewritten in place")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    source = args.qsa.read_text()
    sweep, old = json.loads(args.sweep.read_text()), read_table(source)
    new, report = pick(sweep, old)
    before, after = mean_slowdown(sweep, old), mean_slowdown(sweep, new)
    kept = before - after < MIN_TABLE_GAIN
    if not kept:
        tmp = args.qsa.with_suffix(".py.tmp")
        tmp.write_text(TABLE_RE.sub(lambda _: render(new), source, count=1))
        tmp.replace(args.qsa)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"mean_slowdown_before": before, "mean_slowdown_after": after, "min_gain": MIN_TABLE_GAIN, "kept": kept}
    (args.out / "qsa-int8-table.json").write_text(json.dumps({"table": summary, "entries": report}, indent=2) + "\n")
    print(f"mean slowdown over {len(sweep['cases'])} cases: table as it was {before:.4f}, new {after:.4f}: "
          + (f"under {MIN_TABLE_GAIN} gained, {args.qsa} left as it was" if kept else "rewritten"))
    print("new table's entry (bp <=, width <=) -> (block_n, splits, warps)   per case: before: ms -> after ms (best any stages)")
    for key, entry in report.items():
        print(f"{key:>20} -> {tuple(entry['after'])}")
        for name, c in entry["cases"].items():
            b = c["best_any_stages"]
            before = f"{c['ms_before']:.4f}" if c["ms_before"] is not None else "n/a"
            print(
                f"{'':>22}{name}: {tuple(c['before'])} {before} -> {c['ms_after']:.4f} ms"
                f" (best {b['block_n']}/{b['num_warps']}/{b['target_splits']}/{b['num_stages']} {b['ms']:.4f})"
            )


if __name__ == "__main__":
    main()
