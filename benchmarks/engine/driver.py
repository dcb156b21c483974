"""The one measurement driver: with a transport that says where the engine, tokenizer and state live and
how results go back, wait for the model, start the servers of the layout's arms from the rendered
launch plan, wait for them (retrying on dummy weights when the checkpoint itself did not load), then
run the phases in order while the budget lasts, delivering the summary after each.

Both entry points end here: `python -m benchmarks.engine run` (local transport) and, on a remote GPU
host, `python3 -m benchmarks.engine.transport.chunked measure`. Imports only the standard library at
module level, as the chunked transport needs until its wheels are importable.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.engine import phases as ph
from benchmarks.engine import servers as sv
from benchmarks.engine.phases import AB_PHASE, PHASES, error_text
from benchmarks.engine.servers import LAYOUTS, log

#: What the phases keep back of the budget: gates alone take ~85 s for three arms.
GATES_RESERVE_S = 90
READY_RESERVE_S = 40
#: Fidelity starts only with this much left; the bench skips arms it cannot finish, keeping BENCH_RESERVE_S.
FIDELITY_MIN_S = 30
BENCH_RESERVE_S = 25


class Clock:
    def __init__(self, budget_s: float) -> None:
        self.start, self.budget = time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def run_phases(transport, *, servers: dict, ready: list[str], work: Path, clock: Clock, summary: dict,
               phases: tuple[str, ...] = PHASES, bench_cells: frozenset[tuple[int, int]] | None = None,
               bench_repeats: int = 1) -> None:
    """The phases in PHASES order (whatever order `phases` names them in), each recorded in `summary`
    with the clock's time at its end and delivered: a run stopped later keeps what it measured."""
    import asyncio

    if "gates" in phases:
        summary["gates"] = asyncio.run(ph.run_gates(servers, ready, work, transport.model_dir))
        summary["phases"]["gates_s"] = clock.elapsed()
        summary["determinism_probe"] = asyncio.run(ph.probe_determinism(servers, ready, summary["gates"]))
        summary["phases"]["determinism_probe_s"] = clock.elapsed()
        transport.deliver(work, summary)
    if "fidelity" in phases and clock.left() > FIDELITY_MIN_S:
        try:
            summary["fidelity"] = asyncio.run(ph.run_fidelity(servers, ready, transport.model_dir, work))
        except Exception as exc:
            summary["fidelity"] = {"error": error_text(exc)}
        summary["phases"]["fidelity_s"] = clock.elapsed()
        transport.deliver(work, summary)
    if "bench" in phases:
        def deliver_bench(so_far: dict) -> None:  # what the bench measured survives a run stopped mid-cell
            summary["bench"] = so_far
            transport.deliver(work, summary)

        summary["bench"] = asyncio.run(ph.run_bench(servers, ready, work, clock, reserve_s=BENCH_RESERVE_S,
                                                    cells_wanted=bench_cells, on_result=deliver_bench,
                                                    repeats=bench_repeats))
        summary["phases"]["bench_s"] = clock.elapsed()


def measure(transport, *, budget_s: float, phases: tuple[str, ...] = PHASES, layout: str = "tp1",
            graphs: bool = False, bench_cells: frozenset[tuple[int, int]] | None = None,
            bench_repeats: int | None = None, ab_order: tuple[str, ...] | None = None, ab_mtp: int = 0,
            ab_profile: bool = True, ab_sweep: tuple[float, ...] = ()) -> int:
    """0 when every phase ran (a phase's own failures are in the summary), 1 when the run stopped early."""
    clock = Clock(budget_s)
    work = transport.results_dir()
    graphs = graphs or AB_PHASE in phases  # the A/B measures what users run: CUDA graphs
    summary: dict = {"target": sv.TARGET, "layout": layout, "graphs": graphs, "budget_s": budget_s,
                     "transport": transport.name, "phases": {}, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                            time.gmtime())}
    servers: dict = {}
    try:
        transport.ready(summary, graphs=graphs)
        summary["triton"] = sv.triton_in_use(transport)
        summary["host"] = sv.host_facts()
        sv.start_model(transport)  # a no-op where the transport started it
        sv.wait_model(transport, limit_s=min(180, clock.left() - 60))
        summary["model"] = json.loads((transport.model_dir / sv.MODEL_MARKER).read_text())
        summary["phases"]["model_ready_s"] = clock.elapsed()
        if AB_PHASE in phases:
            from benchmarks.engine import ab

            ab.measure_ab(transport, clock=clock, work=work, summary=summary,
                          deliver=lambda: transport.deliver(work, summary), order=ab_order or sv.layout_arms(layout), mtp_k=ab_mtp,
                          cells_wanted=bench_cells, repeats=bench_repeats or ab.DEFAULT_REPEATS, profile=ab_profile,
                          started=servers, layout=layout, sweep_rates=ab_sweep)
            summary["phases"]["ab_s"] = clock.elapsed()
            return 0
        extra: list[str] = []
        for attempt in ("checkpoint", "dummy"):
            servers = sv.start_servers(transport, work=work, extra_args=extra, attempt=attempt, layout=layout,
                                       graphs=graphs)
            reserve = GATES_RESERVE_S if "gates" in phases else READY_RESERVE_S
            states = sv.wait_servers(servers, timeout_s=max(30.0, clock.left() - reserve))
            summary.setdefault("attempts", {})[attempt] = sv.server_summary(servers, states)
            summary["weights"] = attempt
            summary["phases"]["servers_ready_s"] = clock.elapsed()
            log(f"servers ({attempt} weights): {states}")
            ready = [k for k, v in states.items() if v == "ready"]
            if ready or attempt == "dummy" or not all(sv.weight_load_failed(sv.root_cause(s["log"]))
                                                      for s in servers.values()):
                break
            sv.stop_servers(servers)
            transport.finish(servers, summary)
            extra = list(sv.DUMMY_RETRY_ARGS)  # the checkpoint did not load: measure the engine anyway
        transport.deliver(work, summary)
        if not ready:
            raise RuntimeError("no server became ready")
        run_phases(transport, servers=servers, ready=ready, work=work, clock=clock, summary=summary, phases=phases,
                   bench_cells=bench_cells, bench_repeats=bench_repeats or 1)
        return 0
    except Exception as exc:
        summary["error"] = error_text(exc, 3000)
        log(f"ERROR {summary['error']}")
        return 1
    finally:
        sv.stop_servers(servers)
        transport.finish(servers, summary)
        (work / "model.log").write_text(sv.tail(transport.state / "model.log", 50))
        summary["phases"]["total_s"] = clock.elapsed()
        transport.deliver(work, summary)


# ---------------------------------------------------------------------------------------------
# the options every entry point shares


def add_measure_options(p: argparse.ArgumentParser, *, budget_s: float | None, budget_help: str | None = None) -> None:
    p.add_argument("--budget-s", type=float, default=budget_s,
                   help=budget_help or f"stop starting new work after this many seconds (default {budget_s:g})")
    p.add_argument("--phases", default=",".join(PHASES),
                   help=f"which of {','.join(PHASES)} run once the servers are ready, in that order (default: all)")
    p.add_argument("--layout", choices=list(LAYOUTS), default="tp1",
                   help="tp1: int8, fp8 and bf16 KV on one GPU; tp2-ep: int8 and bf16 with cmp170hx-x2's "
                        "TP2 + EP split, on two GPUs")
    p.add_argument("--graphs", action="store_true", help="CUDA graphs on (enforce_eager off)")
    p.add_argument("--bench-cells", default="",
                   help="only these bench cells, LENxCONC comma list (e.g. 131072x4,131072x16); default all")
    p.add_argument("--bench-repeats", type=int, default=None,
                   help="run the bench cells this many times (arm order shifted each time), to see run-to-run spread "
                        "(default 1; for ab 5)")
    p.add_argument("--ab-order", default="",
                   help="ab: the arms in the order they are served, comma list (default the layout's: int8,fp8,bf16); "
                        "LABEL-pinned: the PLE table pinned instead of mapped; LABEL-cold: the page cache cold at "
                        "start; LABEL-pyswitch: Python's 5 ms switch interval on the PLE gather path")
    p.add_argument("--ab-mtp", type=int, default=0, help="ab: MTP draft tokens (default 0: off; random weights "
                   "accept none)")
    p.add_argument("--ab-no-profile", action="store_true", help="ab: no profiled pass per cell (no step breakdown)")
    p.add_argument("--ab-sweep", default="", help="ab: after the repeats, a seeded Poisson request-rate sweep per arm "
                   "at these rates (requests/s, comma list, e.g. 0.5,1,2,4) with 32K prompts, goodput included")


def measure_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """driver.measure's keyword arguments from the parsed options; p.error on a wrong one."""
    if args.budget_s <= 0:
        p.error("--budget-s must be positive")
    if args.bench_repeats is not None and args.bench_repeats < 1:
        p.error(f"--bench-repeats must be 1 or more, got {args.bench_repeats}")
    if not 0 <= args.ab_mtp <= 4:
        p.error(f"--ab-mtp must be 0..4 (5..8 break the QSA ring capacity), got {args.ab_mtp}")
    try:
        phases = ph.parse_phases(args.phases)
    except ValueError as exc:
        p.error(f"--phases: {exc}")
    try:
        cells = ph.parse_bench_cells(args.bench_cells)
    except ValueError as exc:
        p.error(f"--bench-cells: {exc}")
    order = None
    if args.ab_order:
        from benchmarks.engine.ab import parse_order

        try:
            order = parse_order(args.ab_order, sv.layout_arms(args.layout))
        except ValueError as exc:
            p.error(f"--ab-order: {exc}")
    try:
        sweep = tuple(float(x) for x in args.ab_sweep.split(",") if x.strip())
    except ValueError:
        p.error(f"--ab-sweep: request rates per second, comma list (e.g. 0.5,1,2), got {args.ab_sweep!r}")
    if any(not r > 0 for r in sweep) or len(set(sweep)) != len(sweep):
        p.error(f"--ab-sweep: each rate positive and given once, got {args.ab_sweep!r}")
    return {"budget_s": args.budget_s, "phases": phases, "layout": args.layout, "graphs": args.graphs,
            "bench_cells": cells, "bench_repeats": args.bench_repeats, "ab_order": order, "ab_mtp": args.ab_mtp,
            "ab_profile": not args.ab_no_profile, "ab_sweep": tuple(sorted(sweep))}
