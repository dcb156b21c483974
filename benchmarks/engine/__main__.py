"""The engine harness: the patched vLLM 0.33.0 serving a small random-weight Qwen4Exp, measured by one
driver (gates, fidelity against bf16 KV, the bench grid) through one of two transports.

  python -m benchmarks.engine run --out DIR [--python VENV/bin/python]    here, on this machine's GPU
  python -m benchmarks.engine prepare --out DIR --repo-root CHECKOUT       for a remote GPU host: DIR/run
                                                                           (repo files), DIR/pieces, and
                                                                           DIR/commands.json, its commands
  python -m benchmarks.engine wheels                                       fetch the locked runtime wheels

`run` (local transport) serves from an environment that already has the patched vLLM; it refuses, before
starting anything, a --python without vllm==0.33.0 or a machine without a GPU. `prepare` (chunked
transport) cuts the engine tree, wheels and tokenizer into pieces that fit the runner's commands; run
the commands commands.json lists back to back on one machine: each `land` leaves its piece in that machine's
state, where the next command finds it. The measuring options (--phases, --layout, --graphs,
--bench-cells, --bench-repeats, --budget-s) are the same for both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.engine import driver
from benchmarks.engine import phases as ph
from benchmarks.engine.transport import chunked, local
from builder.errors import BuilderError

#: A local run has no per-command limit; this only stops one that hangs.
LOCAL_BUDGET_S = 3600


def _prepare(p: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    limits = {"command_bytes": args.command_mib << 20, "command_s": args.command_s, "return_bytes": args.return_mib << 20}
    if args.piece_mib is not None and not chunked.MIN_PIECE_BYTES >> 20 <= args.piece_mib < args.command_mib:
        p.error(f"--piece-mib must be in {chunked.MIN_PIECE_BYTES >> 20}..{args.command_mib - 1} "
                f"(a command sends {args.command_mib} MiB, the checkout included)")
    sender = chunked.ChunkedSender(**limits, piece_bytes=None if args.piece_mib is None else args.piece_mib << 20)
    budget_s = chunked.COMMAND_S - chunked.MEASURE_SLACK_S if args.budget_s is None else args.budget_s
    if not 0 < budget_s <= sender.max_budget_s:
        p.error(f"--budget-s must be in 1..{sender.max_budget_s} (the measuring command runs "
                f"{chunked.MEASURE_SLACK_S} s more; one runs at most {args.command_s} s)")
    options = driver.measure_options(p, argparse.Namespace(**{**vars(args), "budget_s": budget_s}))
    out, root = args.out.resolve(), args.repo_root.resolve()
    if not out.is_relative_to(root):
        p.error(f"--out {out} must lie inside --repo-root {root}")
    # The measuring command gets the options that differ from its defaults, checked here already.
    measure_args: list[str] = []
    if args.phases != ",".join(driver.PHASES):
        measure_args += ["--phases", ",".join(options["phases"])]
    if args.bench_cells:
        measure_args += ["--bench-cells", args.bench_cells]
    if args.bench_repeats is not None:
        measure_args += ["--bench-repeats", str(args.bench_repeats)]
    if args.ab_order:
        measure_args += ["--ab-order", ",".join(options["ab_order"])]
    if args.ab_mtp:
        measure_args += ["--ab-mtp", str(args.ab_mtp)]
    if args.ab_no_profile:
        measure_args += ["--ab-no-profile"]
    if options["ab_sweep"]:
        measure_args += ["--ab-sweep", ",".join(f"{r:g}" for r in options["ab_sweep"])]
    return sender.prepare(out=out, repo_root=root, budget_s=int(budget_s), layout=args.layout,
                          graphs=args.graphs or ph.AB_PHASE in options["phases"],
                          triton_cache=args.triton_cache.resolve() if args.triton_cache else None,
                          measure_args=tuple(measure_args), triton=args.triton.resolve() if args.triton else None)


def _run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options = driver.measure_options(p, args)
    transport = local.LocalTransport(out=args.out, python=args.python, state=args.state, tokenizer=args.tokenizer,
                                     pythonpath=tuple(args.pythonpath))
    transport.check_out()
    found = transport.check(layout=options["layout"])
    print(f"local: {json.dumps(found)}; results to {transport.out}", file=sys.stderr)
    return driver.measure(transport, **options)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("wheels", help="fetch the locked wheels")

    run = sub.add_parser("run", help="measure here, with an environment that has the patched vLLM (local transport)",
                         description=local.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--out", type=Path, required=True, help="a new or empty folder: summary.json, logs, evidence")
    run.add_argument("--python", default=sys.executable,
                     help="the interpreter with the patched vllm==0.33.0 the servers run (default: this one)")
    run.add_argument("--pythonpath", type=Path, action="append", default=[], metavar="DIR",
                     help="a folder put in front of --python's packages (e.g. a patched vllm tree); repeatable")
    run.add_argument("--state", type=Path, default=local.DEFAULT_STATE,
                     help="kept between runs: the generated model, Triton's cache (default .cache/engine-local)")
    run.add_argument("--tokenizer", type=Path,
                     help="the tokenizer folder the model is generated around (default: SmolLM2's, prepared by builder)")
    driver.add_measure_options(run, budget_s=LOCAL_BUDGET_S)

    prep = sub.add_parser("prepare", help="the pieces and commands for a remote GPU host (chunked transport)",
                          description=chunked.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    prep.add_argument("--out", type=Path, required=True, help="a folder inside the checkout the remote runner sends")
    prep.add_argument("--repo-root", type=Path, required=True, help="that checkout's root (commands name paths from it)")
    prep.add_argument("--piece-mib", type=int, help="piece size (default: what a command has left beside the checkout and run tree)")
    prep.add_argument("--command-mib", type=int, default=chunked.COMMAND_BYTES >> 20,
                      help="what the runner sends with one command, MiB, the checkout included (default %(default)s)")
    prep.add_argument("--command-s", type=int, default=chunked.COMMAND_S,
                      help="how long the runner lets one command run, seconds (default %(default)s)")
    prep.add_argument("--return-mib", type=int, default=chunked.RETURN_BYTES >> 20,
                      help="the largest file the runner returns, MiB (default %(default)s: 16 less 1 spare)")
    prep.add_argument("--triton-cache", type=Path,
                      help=f"a {chunked.CACHE_ARCHIVE} an earlier measure returned: sent with the measuring command")
    prep.add_argument("--triton", type=Path, help="the engine lock's Triton as benchmarks.kernels.device_triton packs "
                      "it (~45 MB: one more piece); the servers run it instead of the host's own")
    driver.add_measure_options(prep, budget_s=None, budget_help="the measuring command's budget (default: what "
                               "--command-s leaves it, 510 s of 600)")
    args = p.parse_args(argv)
    try:
        if args.command == "wheels":
            from benchmarks.engine.lock import fetch_wheels

            print("\n".join(w.name for w in fetch_wheels(dest=chunked.WHEELS_DIR)))
        elif args.command == "prepare":
            print(json.dumps(_prepare(prep, args), indent=2))
        else:
            return _run(run, args)
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
