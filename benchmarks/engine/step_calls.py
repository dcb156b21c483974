"""The host's CUDA calls per decode step, arm beside arm, from the traces an A/B kept.

An A/B's profiled passes keep their gzip traces under results/profiles/ARM/ while they fit
(ab.KEEP_TRACES_BYTES). For each arm and cell found there, this reads the decode steps (breakdown.py)
and writes the commonest step's CUDA calls in order (launches with what they launched, copies, syncs,
graph replays), the share of steps that made exactly those, the host's time per step, and which other
arms of the same cell made the same calls: two arms that do, do the same host work per step, and a
difference in their step time is not a call either of them makes.

    python -m benchmarks.engine.step_calls --out DIR PROFILES_DIR

writes DIR/step-calls.json and DIR/step-calls.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchmarks.engine import breakdown as bd
from benchmarks.engine.ab_report import cell_label, same_calls_as, sequence_digest

JSON_FILE = "step-calls.json"
MD_FILE = "step-calls.md"
#: The cell a trace is of, from the name the A/B gives it ("in8192-c4_dp0_..." -> 8192, 4).
CELL = re.compile(r"^in(\d+)-c(\d+)")


def trace_cells(profiles: Path) -> list[tuple[str, int, int, Path]]:
    """(arm, input length, concurrency, trace) for every kept trace, by arm folder then cell."""
    out = []
    for trace in sorted(profiles.glob("*/*.pt.trace.json.gz")):
        if m := CELL.match(trace.name):
            out.append((trace.parent.name, int(m.group(1)), int(m.group(2)), trace))
    return sorted(out, key=lambda r: (r[1], r[2], r[0]))


def step_calls(profiles: Path) -> list[dict]:
    rows = []
    for arm, length, conc, trace in trace_cells(profiles):
        b = bd.decode_breakdown(bd.load_trace(trace), gen_requests=conc)
        rows.append({"arm": arm, "input_len": length, "concurrency": conc, "trace": trace.name, "steps": b.steps,
                     "step_us": round(b.step_us, 1), "gpu_busy_us": round(b.gpu_busy_us, 1),
                     "host_step_us": round(b.host_step_us, 1) if b.host_step_us else None,
                     "calls": len(b.host_sequence), "share": round(b.host_sequence_share or 0.0, 3),
                     "digest": sequence_digest(b.host_sequence), "sequence": b.host_sequence})
    alike = same_calls_as([(r["arm"], (r["input_len"], r["concurrency"]), r["digest"]) for r in rows])
    for r, same in zip(rows, alike):
        r["same_as"] = same
    return rows


def markdown(rows: list[dict], source: str) -> str:
    lines = [f"# The host's CUDA calls per decode step ({source})", "",
             "Each arm's commonest decode step in the profiled pass: its CUDA calls in order, the share of "
             "steps that made exactly those, and the arms of the same cell whose commonest step made the same "
             "calls in the same order. Step and GPU busy: the profiled pass's means (the profiler's own cost "
             "included).", "",
             "| arm | cell | decode steps | CUDA calls | share of steps | same calls as | step us | GPU busy us |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {cell_label(r['input_len'], r['concurrency'])} | {r['steps']} | {r['calls']} | "
                     f"{r['share']:.0%} | {', '.join(r['same_as']) or '-'} | {r['step_us']:.0f} | "
                     f"{r['gpu_busy_us']:.0f} |")
    if rows:
        first = rows[0]
        lines += ["", f"The calls of {first['arm']}'s step at {cell_label(first['input_len'], first['concurrency'])}, "
                  "in order:", "", *[f"{i + 1}. `{c}`" for i, c in enumerate(first["sequence"])]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profiles", type=Path, help="an A/B's results/profiles folder (ARM/in<N>-c<C>_*.pt.trace.json.gz)")
    p.add_argument("--out", type=Path, required=True, help=f"folder for {JSON_FILE} and {MD_FILE}")
    args = p.parse_args(argv)
    if not trace_cells(args.profiles):
        print(f"step_calls: no kept trace under {args.profiles} (ARM/in<N>-c<C>_*.pt.trace.json.gz): give the "
              "profiles folder of an A/B's results", file=sys.stderr)
        return 2
    rows = step_calls(args.profiles)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / JSON_FILE).write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / MD_FILE).write_text(markdown(rows, args.profiles.as_posix()))
    print(f"wrote {args.out / JSON_FILE}, {args.out / MD_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
