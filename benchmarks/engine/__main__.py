"""CPU side of the engine harness.

  python -m benchmarks.engine wheels                    fetch the locked runtime wheels (.cache/engine-wheels)
  python -m benchmarks.engine prepare --out DIR         everything the calls to the GPU host send, in DIR:
                                                        DIR/carry (manifest + pieces), DIR/run (repo copy),
                                                        DIR/calls.json (each call's carry list and command)

`prepare` prints the calls; run them back to back on one machine: each `land` leaves its piece in that
machine's /tmp state, where the next call finds it.
`prepare --triton-cache FILE` sends a Triton cache an earlier `measure` brought back
($OUT/triton-cache.tar.xz) with the measuring call, so fresh servers skip most of their compiles.
`prepare --phases P --bench-cells LENxCONC,... --bench-repeats N` puts those into the measuring call.
`prepare --triton ARCHIVE` carries the engine lock's Triton (benchmarks/device_triton.py packs it) and
the servers run it instead of the device's own, as the images do.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.engine.device import CACHE_ARCHIVE, PHASES, parse_bench_cells, parse_phases
from benchmarks.engine.errors import EngineHarnessError
from builder.atomic import replace_dir
from builder.constants import LAUNCH_MIDDLEWARE_NAME, LAUNCH_TEMPLATES_DIR, PATCHES_DIR, REPO_ROOT
from builder.errors import BuilderError

WHEELS_DIR = REPO_ROOT / ".cache" / "engine-wheels"
#: nvidia-cutlass-dsl for CUDA graphs, carried only with --graphs.
GRAPHS_LOCK = Path(__file__).with_name("graphs.lock")
#: The --middleware module the launch plan names; the launch script puts its folder on PYTHONPATH.
LAUNCH_MIDDLEWARE_SRC = str((LAUNCH_TEMPLATES_DIR / Path(LAUNCH_MIDDLEWARE_NAME).name).relative_to(REPO_ROOT))
#: What the device driver imports from the repo (copied into DIR/run).
RUN_FILES = ("builder", LAUNCH_MIDDLEWARE_SRC, str(PATCHES_DIR.relative_to(REPO_ROOT)),
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


#: What one call to the GPU host may send: the checkout's travelling files plus what it carries.
CALL_BYTES = 64 << 20
CALL_MARGIN = 1 << 20
#: Where the measuring call finds a carried Triton cache (device.py --triton-cache).
CACHE_DIR = "caches"


def travelling_bytes(root: Path) -> int:
    """The checkout's files every call to the GPU host sends: tracked, and untracked but not ignored."""
    names = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    return sum((root / n).stat().st_size for n in names if n and (root / n).is_file())


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


#: The device kind each --layout needs.
LAYOUT_KINDS = {"tp1": "nvidia-h200", "tp2-ep": "nvidia-h200-x2"}


def host_calls(*, out: Path, repo_rel: str, pieces: list[str], budget_s: int, layout: str = "tp1",
                 graphs: bool = False, triton_cache: bool = False, measure_args: tuple[str, ...] = ()) -> list[dict]:
    """One call per piece; the last one also measures, with measure_args (--phases, --bench-cells,
    --bench-repeats) added. Paths are relative to the repo root the remote runner sends (carry names them
    there); `kind` is the device kind every call must ask for."""
    run = f"{repo_rel}/run"
    carry_dir = f"{repo_rel}/carry"
    caches = f"{repo_rel}/{CACHE_DIR}"
    driver = f"python3 {run}/benchmarks/engine/device.py"
    calls = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        cmd = (
            f"set -o pipefail; PYTHONUNBUFFERED=1 {driver} measure --carried {carry_dir} --state /tmp/e18 "
            f"--out $OUT --budget-s {budget_s} --layout {layout}{' --graphs' if graphs else ''}"
            f"{f' --triton-cache {caches}/{CACHE_ARCHIVE}' if triton_cache else ''}"
            f"{''.join(' ' + shlex.quote(a) for a in measure_args)} 2>&1 | tee $OUT/driver.log"
            if last else f"{driver} land --carried {carry_dir} --state /tmp/e18"
        )
        carry = [run, f"{carry_dir}/manifest.json", f"{carry_dir}/{piece}", *([caches] if last and triton_cache else [])]
        calls.append({"carry": carry, "command": cmd, "timeout_s": budget_s + 90 if last else 240,
                      "kind": LAYOUT_KINDS[layout]})
    return calls


def check_triton_archive(archive: Path) -> str:
    """The archive's wheel name, after checking device_triton.py packed it from the engine lock's pin."""
    from benchmarks.device_triton import LOCK, lock_pin

    sidecar = archive.with_name(archive.name + ".json")
    if not archive.is_file() or not sidecar.is_file():
        raise EngineHarnessError(f"--triton {archive}: no such archive with its {sidecar.name} beside it",
                                 hint=f"pack it: python benchmarks/device_triton.py --out {archive}")
    wheel = json.loads(sidecar.read_text())["wheel"]
    pin = lock_pin(LOCK)
    if not wheel.startswith(f"triton-{pin}-"):
        raise EngineHarnessError(f"--triton {archive} was packed from {wheel}; the engine lock pins triton {pin}",
                                 hint=f"pack it again: python benchmarks/device_triton.py --out {archive}")
    return wheel


def prepare(*, out: Path, repo_root: Path, budget_s: int, piece_mib: int | None, layout: str = "tp1",
            graphs: bool = False, triton_cache: Path | None = None, measure_args: tuple[str, ...] = (),
            triton: Path | None = None) -> dict:
    from benchmarks.engine.carry import assemble
    from benchmarks.engine.lock import fetch_wheels
    from builder.hashing import sha256_file
    from builder.models.smollm2 import prepare_smollm2
    from builder.patches.engine import fetch_engine

    if triton_cache is not None and not triton_cache.is_file():
        raise EngineHarnessError(f"--triton-cache {triton_cache}: no such file",
                                 hint=f"give the {CACHE_ARCHIVE} an earlier measure call wrote to $OUT")
    cache_bytes = triton_cache.stat().st_size if triton_cache is not None else 0
    if triton is not None:
        check_triton_archive(triton)
    with replace_dir(out / "run", replaceable=_earlier_run_tree, what="run tree", error=EngineHarnessError) as run:
        copy_run_tree(run)
    # Every call sends the checkout and the run tree; a piece gets what is left of the call's 64 MiB.
    room = CALL_BYTES - CALL_MARGIN - travelling_bytes(repo_root) - tree_bytes(out / "run")
    piece_bytes = room if piece_mib is None else piece_mib << 20
    if piece_bytes > room or piece_bytes < 8 << 20:
        raise EngineHarnessError(
            f"a piece of {piece_bytes >> 20} MiB does not fit a call to the GPU host: the checkout and run tree leave {room >> 20} MiB",
            hint="leave --piece-mib out (it then takes what is left), or carry less in the checkout (it travels with every call)")
    engine = fetch_engine()
    tokenizer = prepare_smollm2().path
    wheels = fetch_wheels(dest=WHEELS_DIR)
    graph_wheels = fetch_wheels(dest=WHEELS_DIR / "graphs", lock=GRAPHS_LOCK) if graphs else []
    series = sha256_file(PATCHES_DIR / "series")
    manifest = assemble(
        wheel=engine.wheel, wheel_sha256=engine.wheel_sha256, patches_dir=PATCHES_DIR, series_sha256=series,
        wheels=wheels, tokenizer_dir=tokenizer, out=out / "carry", work=WHEELS_DIR.parent / "engine-carry",
        piece_bytes=piece_bytes, graph_wheels=graph_wheels, triton_archive=triton,
    )
    if triton_cache is not None:
        if manifest.pieces[-1].size + cache_bytes > room:
            raise EngineHarnessError(
                f"--triton-cache {triton_cache} ({cache_bytes >> 20} MiB) and the last piece "
                f"({manifest.pieces[-1].size >> 20} MiB) do not fit the measuring call ({room >> 20} MiB)",
                hint="start without the cache (the servers compile again), or shrink the cache")
        (out / CACHE_DIR).mkdir(exist_ok=True)
        shutil.copy2(triton_cache, out / CACHE_DIR / CACHE_ARCHIVE)
    else:
        (out / CACHE_DIR / CACHE_ARCHIVE).unlink(missing_ok=True)
    calls = host_calls(out=out, repo_rel=str(out.relative_to(repo_root)), pieces=[p.name for p in manifest.pieces],
                         budget_s=budget_s, layout=layout, graphs=graphs, triton_cache=triton_cache is not None,
                         measure_args=measure_args)
    (out / "calls.json").write_text(json.dumps(calls, indent=2) + "\n")
    return {"pieces": [(p.name, p.size) for p in manifest.pieces], "calls": calls}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("wheels", help="fetch the locked wheels")
    prep = sub.add_parser("prepare", help="assemble the carry and the calls to the GPU host")
    prep.add_argument("--out", type=Path, required=True, help="a folder inside the checkout the remote runner sends")
    prep.add_argument("--repo-root", type=Path, required=True, help="that checkout's root (calls name paths from it)")
    prep.add_argument("--budget-s", type=int, default=510, help="the measuring call's own budget (its call gets 90 s more, up to the 600 s one call may run)")
    prep.add_argument("--piece-mib", type=int, help="piece size (default: what a call has left after the checkout and run tree)")
    prep.add_argument("--layout", choices=list(LAYOUT_KINDS), default="tp1",
                      help="tp2-ep: int8 vs bf16 with cmp170hx-x2's TP2 + EP, on the nvidia-h200-x2 kind")
    prep.add_argument("--graphs", action="store_true",
                      help="carry nvidia-cutlass-dsl and quack-kernels (graphs.lock, ~105 MB: two more pieces) and measure with CUDA graphs")
    prep.add_argument("--triton-cache", type=Path,
                      help=f"a {CACHE_ARCHIVE} an earlier measure call brought back: sent with the measuring call")
    prep.add_argument("--triton", type=Path, help="the engine lock's Triton as benchmarks/device_triton.py packs "
                      "it (~45 MB: one more piece); the servers run it instead of the device's own")
    prep.add_argument("--phases", help=f"the measuring call's phases, a comma list of {','.join(PHASES)} (default: all)")
    prep.add_argument("--bench-cells", help="the measuring call's bench cells, LENxCONC comma list (default: all)")
    prep.add_argument("--bench-repeats", type=int, default=1, help="the measuring call runs its bench cells this many times")
    args = p.parse_args(argv)
    try:
        if args.command == "wheels":
            from benchmarks.engine.lock import fetch_wheels

            print("\n".join(w.name for w in fetch_wheels(dest=WHEELS_DIR)))
        else:
            if not 0 < args.budget_s <= 510:
                p.error("--budget-s must be in 1..510 (the measuring call adds 90 s; one call runs at most 600 s)")
            if args.piece_mib is not None and not 8 <= args.piece_mib <= 60:
                p.error("--piece-mib must be in 8..60 (64 MiB per call, the checkout travels too)")
            out, root = args.out.resolve(), args.repo_root.resolve()
            if not out.is_relative_to(root):
                p.error(f"--out {out} must lie inside --repo-root {root}")
            measure_args: list[str] = []
            if args.phases is not None:
                try:
                    measure_args += ["--phases", ",".join(parse_phases(args.phases))]
                except ValueError as exc:
                    p.error(f"--phases: {exc}")
            if args.bench_cells:
                try:
                    parse_bench_cells(args.bench_cells)
                except ValueError as exc:
                    p.error(f"--bench-cells: {exc}")
                measure_args += ["--bench-cells", args.bench_cells]
            if args.bench_repeats < 1:
                p.error(f"--bench-repeats must be 1 or more, got {args.bench_repeats}")
            if args.bench_repeats > 1:
                measure_args += ["--bench-repeats", str(args.bench_repeats)]
            print(json.dumps(prepare(out=out, repo_root=root, budget_s=args.budget_s, piece_mib=args.piece_mib,
                                     layout=args.layout, graphs=args.graphs,
                                     triton_cache=args.triton_cache.resolve() if args.triton_cache else None,
                                     measure_args=tuple(measure_args),
                                     triton=args.triton.resolve() if args.triton else None), indent=2))
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
