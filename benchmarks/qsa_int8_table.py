"""Write the measured-best int8 sm_90 tile entries into a patched ops/qsa.py.

Reads a sweep (`qsa_grid.py --sweep`, or the older `qsa_kv_layouts.py --sweep`)
and, for every bucket of `_SM90_INT8_TABLE` that a swept case falls in, picks
the (block_n, target_splits, num_warps) with the least summed slowdown over
that bucket's cases (each against its own fastest candidate). Cases are first
grouped by base_programs (the table's only key): where two neighbouring groups
of one bucket have different bests, the bucket is split at the roundest number
between them, so each measured base_programs gets its own best. Only
num_stages 2 is shippable (the launch fixes it); the best of any stage count is
reported beside it. Buckets no swept case falls in are left as they are.

    python benchmarks/qsa_int8_table.py --sweep SWEEP.json --qsa PATCHED/.../ops/qsa.py --out OUTDIR
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

SHIPPED_STAGES = 2
TABLE_RE = re.compile(r"^_SM90_INT8_TABLE = \(\n.*?^\)\n", re.S | re.M)


def read_table(source: str) -> list[tuple[int | None, tuple[int, int, int]]]:
    match = TABLE_RE.search(source)
    if match is None:
        raise SystemExit("no _SM90_INT8_TABLE literal in the given qsa.py")
    return list(ast.literal_eval(match.group(0).split("=", 1)[1].strip()))


def bucket_of(table, base_programs: int) -> int:
    return next(i for i, (limit, _) in enumerate(table) if limit is None or base_programs <= limit)


def shippable(case: dict) -> dict[tuple[int, int, int], float]:
    """(block_n, target_splits, num_warps) -> ms, at the launch's num_stages."""
    return {(r["block_n"], r["target_splits"], r["num_warps"]): r["ms"] for r in case["candidates"] if r["num_stages"] == SHIPPED_STAGES}


def best_of(cases: list[dict]) -> tuple[int, int, int]:
    """The shippable candidate with the least summed slowdown over ``cases``."""
    per_case = [shippable(c) for c in cases]
    common = set.intersection(*(set(c) for c in per_case))
    return min(common, key=lambda cfg: (sum(c[cfg] / min(c.values()) for c in per_case), cfg))


def round_limit(lo: int, hi: int) -> int:
    """The roundest integer in [lo, hi): most trailing zero bits, then largest."""
    step = 1 << (hi - 1).bit_length()
    while (hi - 1) // step * step < lo:
        step >>= 1
    return (hi - 1) // step * step


def split_buckets(sweep: dict, table) -> list:
    """Table with a new bucket limit between swept base_programs whose bests differ."""
    table = list(table)
    groups: dict[int, list[dict]] = {}
    for case in sweep["cases"].values():
        groups.setdefault(case["base_programs"], []).append(case)
    ordered = sorted(groups)
    for lo, hi in zip(ordered, ordered[1:], strict=False):
        if bucket_of(table, lo) != bucket_of(table, hi) or best_of(groups[lo]) == best_of(groups[hi]):
            continue
        index = bucket_of(table, hi)
        table.insert(index, (round_limit(lo, hi), table[index][1]))
    return table


def pick(sweep: dict, table) -> tuple[list, dict]:
    """New table and, per bucket, the choice with its per-case numbers."""
    table = split_buckets(sweep, table)
    by_bucket: dict[int, list[str]] = {}
    for name, case in sweep["cases"].items():
        by_bucket.setdefault(bucket_of(table, case["base_programs"]), []).append(name)
    new, report = list(table), {}
    for index, names in sorted(by_bucket.items()):
        per_case = {name: shippable(sweep["cases"][name]) for name in names}
        choice = best_of([sweep["cases"][name] for name in names])
        limit, old = table[index]
        new[index] = (limit, choice)
        report[str(limit)] = {
            "before": list(old),
            "after": list(choice),
            "cases": {
                name: {
                    "ms_before": per_case[name].get(tuple(old)),
                    "ms_after": per_case[name][choice],
                    "best_any_stages": sweep["cases"][name]["candidates"][0],
                }
                for name in names
            },
        }
    return new, report


def render(table) -> str:
    return "_SM90_INT8_TABLE = (\n" + "".join(f"    ({limit}, {tuple(cfg)}),\n" for limit, cfg in table) + ")\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, required=True)
    parser.add_argument("--qsa", type=Path, required=True, help="patched ops/qsa.py, rewritten in place")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    source = args.qsa.read_text()
    table = read_table(source)
    new, report = pick(json.loads(args.sweep.read_text()), table)
    tmp = args.qsa.with_suffix(".py.tmp")
    tmp.write_text(TABLE_RE.sub(lambda _: render(new), source, count=1))
    tmp.replace(args.qsa)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "qsa-int8-table.json").write_text(json.dumps(report, indent=2) + "\n")
    print("bucket (bp <=)  before (block_n, splits, warps) -> after   per case: ms before -> after (best any stages)")
    for limit, entry in report.items():
        print(f"{limit:>14}  {tuple(entry['before'])} -> {tuple(entry['after'])}")
        for name, c in entry["cases"].items():
            b = c["best_any_stages"]
            before = f"{c['ms_before']:.3f}" if c["ms_before"] is not None else "n/a"
            print(
                f"{'':>16}{name}: {before} -> {c['ms_after']:.3f} ms"
                f" (best {b['block_n']}/{b['num_warps']}/{b['target_splits']}/{b['num_stages']} {b['ms']:.3f})"
            )


if __name__ == "__main__":
    main()
