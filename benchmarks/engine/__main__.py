"""CPU side of the engine harness.

  python -m benchmarks.engine wheels                    fetch the locked runtime wheels (.cache/engine-wheels)
  python -m benchmarks.engine prepare --out DIR         everything the device calls carry, in DIR:
                                                        DIR/carry (manifest + pieces), DIR/run (repo copy),
                                                        DIR/calls.json (each call's carry list and command)

`prepare` prints the device calls; run them back to back (the machine stays warm 30 s).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from builder.atomic import replace_dir
from builder.constants import LAUNCH_MIDDLEWARE_NAME, LAUNCH_TEMPLATES_DIR, PATCHES_DIR, REPO_ROOT
from builder.errors import BuilderError, EngineHarnessError

WHEELS_DIR = REPO_ROOT / ".cache" / "engine-wheels"
#: nvidia-cutlass-dsl for CUDA graphs, carried only with --graphs.
GRAPHS_LOCK = Path(__file__).with_name("graphs.lock")
#: The --middleware module the launch plan names; the launch script puts its folder on PYTHONPATH.
LAUNCH_MIDDLEWARE_SRC = str((LAUNCH_TEMPLATES_DIR / Path(LAUNCH_MIDDLEWARE_NAME).name).relative_to(REPO_ROOT))
#: What the device driver imports from the repo (copied into DIR/run).
RUN_FILES = ("builder", "bundle/benchmark_vllm.py", LAUNCH_MIDDLEWARE_SRC, str(PATCHES_DIR.relative_to(REPO_ROOT)),
             "targets", "benchmarks/engine")


def copy_run_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.lock")
    for rel in RUN_FILES:
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=ignore)
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _earlier_run_tree(dest: Path) -> str | None:
    """None when `dest` holds only what copy_run_tree writes (RUN_FILES' top-level names)."""
    extra = sorted({p.name for p in dest.iterdir()} - {rel.split("/", 1)[0] for rel in RUN_FILES})
    return f"holds {', '.join(extra[:5])}, which copy_run_tree does not write" if extra else None


#: The device kind each --layout needs.
LAYOUT_KINDS = {"tp1": "nvidia-h200", "tp2-ep": "nvidia-h200-x2"}


def device_calls(*, out: Path, repo_rel: str, pieces: list[str], budget_s: int, layout: str = "tp1",
                 graphs: bool = False) -> list[dict]:
    """One call per piece; the last one also measures. Paths are relative to the repo root the
    run tool sends (carry names them there); `kind` is the device kind every call must ask for."""
    run = f"{repo_rel}/run"
    carry_dir = f"{repo_rel}/carry"
    driver = f"python3 {run}/benchmarks/engine/device.py"
    calls = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        cmd = (
            f"set -o pipefail; PYTHONUNBUFFERED=1 {driver} measure --carried {carry_dir} --state /tmp/e18 "
            f"--out $OUT --budget-s {budget_s} --layout {layout}{' --graphs' if graphs else ''} 2>&1 | tee $OUT/driver.log"
            if last else f"{driver} land --carried {carry_dir} --state /tmp/e18"
        )
        calls.append({"carry": [run, f"{carry_dir}/manifest.json", f"{carry_dir}/{piece}"], "command": cmd,
                      "timeout_s": budget_s + 90 if last else 240, "kind": LAYOUT_KINDS[layout]})
    return calls


def prepare(*, out: Path, repo_rel: str, budget_s: int, piece_mib: int, layout: str = "tp1",
            graphs: bool = False) -> dict:
    from benchmarks.engine.carry import assemble
    from benchmarks.engine.lock import fetch_wheels
    from builder.hashing import sha256_file
    from builder.models.smollm2 import prepare_smollm2
    from builder.patches.engine import fetch_engine

    engine = fetch_engine()
    tokenizer = prepare_smollm2().path
    wheels = fetch_wheels(dest=WHEELS_DIR)
    graph_wheels = fetch_wheels(dest=WHEELS_DIR / "graphs", lock=GRAPHS_LOCK) if graphs else []
    series = sha256_file(PATCHES_DIR / "series")
    manifest = assemble(
        wheel=engine.wheel, wheel_sha256=engine.wheel_sha256, patches_dir=PATCHES_DIR, series_sha256=series,
        wheels=wheels, tokenizer_dir=tokenizer, out=out / "carry", work=WHEELS_DIR.parent / "engine-carry",
        piece_bytes=piece_mib << 20, graph_wheels=graph_wheels,
    )
    with replace_dir(out / "run", replaceable=_earlier_run_tree, what="run tree", error=EngineHarnessError) as run:
        copy_run_tree(run)
    calls = device_calls(out=out, repo_rel=repo_rel, pieces=[p.name for p in manifest.pieces], budget_s=budget_s,
                         layout=layout, graphs=graphs)
    (out / "calls.json").write_text(json.dumps(calls, indent=2) + "\n")
    return {"pieces": [(p.name, p.size) for p in manifest.pieces], "calls": calls}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("wheels", help="fetch the locked wheels")
    prep = sub.add_parser("prepare", help="assemble the carry and the device calls")
    prep.add_argument("--out", type=Path, required=True, help="a folder inside the checkout the run tool sends")
    prep.add_argument("--repo-root", type=Path, required=True, help="that checkout's root (calls name paths from it)")
    prep.add_argument("--budget-s", type=int, default=510, help="the measuring call's own budget (its call gets 90 s more, up to the 600 s a device call may run)")
    prep.add_argument("--piece-mib", type=int, default=56)
    prep.add_argument("--layout", choices=list(LAYOUT_KINDS), default="tp1",
                      help="tp2-ep: int8 vs bf16 with cmp170hx-x2's TP2 + EP, on the nvidia-h200-x2 kind")
    prep.add_argument("--graphs", action="store_true",
                      help="carry nvidia-cutlass-dsl and quack-kernels (graphs.lock, ~105 MB: two more pieces) and measure with CUDA graphs")
    args = p.parse_args(argv)
    try:
        if args.command == "wheels":
            from benchmarks.engine.lock import fetch_wheels

            print("\n".join(w.name for w in fetch_wheels(dest=WHEELS_DIR)))
        else:
            if not 0 < args.budget_s <= 510:
                p.error("--budget-s must be in 1..510 (the measuring call adds 90 s; a device call runs at most 600 s)")
            if args.piece_mib <= 0 or args.piece_mib > 60:
                p.error("--piece-mib must be in 1..60 (64 MiB per call, the repo copy travels too)")
            out, root = args.out.resolve(), args.repo_root.resolve()
            if not out.is_relative_to(root):
                p.error(f"--out {out} must lie inside --repo-root {root}")
            print(json.dumps(prepare(out=out, repo_rel=str(out.relative_to(root)), budget_s=args.budget_s,
                                     piece_mib=args.piece_mib, layout=args.layout, graphs=args.graphs), indent=2))
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
