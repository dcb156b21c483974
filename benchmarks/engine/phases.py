"""The measurement phases, run against servers that are ready: the gates that mean something with random
weights (and the determinism probe where that gate failed), the fidelity comparison against bf16 KV,
and the benchmark grid (prompt length x concurrency, arms in a Latin-square order, MTP acceptance
from /metrics). Each phase records what failed under its own name and lets the next one run.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.engine.servers import TARGET, log

if TYPE_CHECKING:
    from benchmarks.engine.driver import Clock

#: What `measure` runs once the servers are ready, in this order.
PHASES = ("gates", "fidelity", "bench")
#: The engine A/B (ab.py): it starts its servers itself, one at a time, so it runs alone.
AB_PHASE = "ab"
#: The gates that mean something with random weights, in order; api_surface last, since a check that
#: kills an engine (what that gate is for) would otherwise take the other gates with it.
GATES = ("kv_pool", "determinism", "prefix_cache", "api_surface")
FIDELITY_PROMPTS = 100
#: Longer than the QSA budget (2048 selected tokens), so the sparse selection is active.
FIDELITY_PROMPT_TOKENS = 3072
FIDELITY_GREEDY_TOKENS = 32
FIDELITY_SAMPLE_IDS = 128
BENCH_LENGTHS = (8192, 32768, 131072)
BENCH_CONCURRENCY = (1, 4, 16)
BENCH_OUTPUT_TOKENS = 64
#: What a skipped bench arm gives as its reason (benchmarks.engine.report lists them).
BUDGET_REASON = "time budget"


def error_text(exc: BaseException, limit: int = 1500) -> str:
    """The exception and the last frames it passed through: a GPU run is too dear to lose a cause."""
    import traceback

    frames = "".join(traceback.format_tb(exc.__traceback__)[-3:])
    return f"{type(exc).__name__}: {exc}"[:limit // 2] + "\n" + frames[-(limit // 2):]


def parse_phases(text: str) -> tuple[str, ...]:
    """'gates,bench' -> ('gates', 'bench'); refuses an empty list, a phase not in PHASES, and AB_PHASE
    beside another (the A/B serves one arm at a time; the others need every arm up together)."""
    phases = tuple(x for x in text.split(",") if x)
    if not phases or set(phases) - {*PHASES, AB_PHASE}:
        raise ValueError(f"choose from {','.join(PHASES)} (or {AB_PHASE} alone), got {text!r}")
    if AB_PHASE in phases and len(phases) > 1:
        raise ValueError(f"{AB_PHASE} runs alone (it starts one server at a time); run the others in another "
                         f"measure, got {text!r}")
    return phases


def grid(cells_wanted: frozenset[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """The bench grid's cells in order (length, then concurrency), or only those of `cells_wanted`."""
    return [(n, c) for n in BENCH_LENGTHS for c in BENCH_CONCURRENCY if cells_wanted is None or (n, c) in cells_wanted]


def cell_name(length: int, conc: int) -> str:
    return f"in{length}-c{conc}"


def cell_workload(length: int, conc: int):
    """The cell's requests: max(conc, 2) prompts of `length` tokens, BENCH_OUTPUT_TOKENS out, `conc` at once."""
    from builder.measure import client as bench

    return bench.Workload(cell_name(length, conc), "concurrency", length, BENCH_OUTPUT_TOKENS, max(conc, 2), conc)


def parse_bench_cells(text: str) -> frozenset[tuple[int, int]] | None:
    """'131072x4,131072x16' -> {(131072, 4), (131072, 16)}; '' -> None (every cell)."""
    if not text.strip():
        return None
    cells = set()
    for item in filter(None, (x.strip() for x in text.split(","))):
        length, sep, conc = item.partition("x")
        if not sep or not length.isdigit() or not conc.isdigit() or (int(length), int(conc)) not in grid():
            raise ValueError(f"{item!r} is not a grid cell; choose LENxCONC with LEN in {BENCH_LENGTHS} "
                             f"and CONC in {BENCH_CONCURRENCY}")
        cells.add((int(length), int(conc)))
    return frozenset(cells)


async def run_gates(servers: dict, ready: list[str], work: Path, model_dir: Path) -> dict:
    from builder.config import config_digest
    from builder.measure.gates import run_gates_async
    from builder.measure.settings import gate_settings

    out = {}
    for label in ready:
        s = servers[label]
        try:
            s["gate_settings"] = gate_settings(s["cfg"], model_dir=model_dir)  # the determinism probe reads it too
        except Exception as exc:  # recorded with where it came from; the next arm and phase still run
            out[label] = {"error": error_text(exc)}
            log(f"gates {label}: {out[label]['error'][:300]}")
            continue
        out[label] = {}
        digest, server_log = config_digest(s["cfg"]), s["log"].read_text(errors="replace")
        for gate in GATES:  # one at a time: a gate that raises costs only its own verdict, not the arm's others
            try:
                (ev,) = await run_gates_async(
                    url=s["url"], target=TARGET, settings=s["gate_settings"], config_digest=digest,
                    out_dir=work / f"gates-{label}", only=[gate], server_log=server_log,
                )
                out[label][gate] = {"verdict": ev.verdict, "summary": ev.summary, "observed": ev.observed}
            except Exception as exc:
                out[label][gate] = {"verdict": "error", "summary": error_text(exc, 300), "error": error_text(exc)}
        log(f"gates {label}: " + json.dumps({k: v["summary"] if isinstance(v, dict) else v
                                             for k, v in out[label].items()})[:300])
    return out


async def probe_determinism(servers: dict, ready: list[str], gates: dict) -> dict:
    """Where the determinism gate failed, the same prompt again one at a time (determinism.py says
    what each outcome means), with the gate's settings; the arms run side by side."""
    import asyncio

    from benchmarks.engine import determinism
    from builder.measure.settings import load_expectations

    failed = [label for label in ready if gates.get(label, {}).get("determinism", {}).get("verdict") == "fail"]

    async def one(label: str) -> dict:
        s = servers[label]
        try:
            settings = s["gate_settings"]
            prompt = load_expectations(settings.expectations).determinism_prompt
            return await determinism.probe(s["url"], s["cfg"].model.served_name, prompt,
                                           runs=settings.gates.determinism_runs, max_tokens=64)
        except Exception as exc:
            return {"error": error_text(exc)}

    out = dict(zip(failed, await asyncio.gather(*(one(label) for label in failed))))
    log("determinism probe: " + json.dumps(out)[:400])
    return out


def fidelity_prompts(model_dir: Path) -> list[list[int]]:
    """FIDELITY_PROMPTS distinct prompts of exactly FIDELITY_PROMPT_TOKENS token ids."""
    import random

    from transformers import AutoTokenizer

    from builder.measure import client as bench

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompts = []
    for i in range(FIDELITY_PROMPTS):
        rng = random.Random(f"fidelity-{i}")
        words = " ".join(rng.choice(bench._VOCAB) for _ in range(FIDELITY_PROMPT_TOKENS * 2))
        ids = tok(f"[fidelity {i}] " + words, add_special_tokens=False).input_ids[:FIDELITY_PROMPT_TOKENS]
        if len(ids) != FIDELITY_PROMPT_TOKENS:
            raise RuntimeError(f"prompt {i} has only {len(ids)} tokens")
        prompts.append(ids)
    return prompts


async def run_fidelity(servers: dict, ready: list[str], model_dir: Path, work: Path) -> dict:
    import asyncio
    import dataclasses

    from transformers import AutoTokenizer

    from benchmarks.engine import fidelity

    if "bf16" not in ready:
        return {"error": "the bf16 KV server is not ready: nothing to compare against"}
    vocab = len(AutoTokenizer.from_pretrained(str(model_dir)))
    prompts = fidelity_prompts(model_dir)
    ids = [fidelity.sample_ids(vocab_size=vocab, m=FIDELITY_SAMPLE_IDS, seed=i) for i in range(len(prompts))]
    model = servers["bf16"]["cfg"].model.served_name

    async def query(label: str):
        return await fidelity.query_server(servers[label]["url"], model, prompts, ids_per_prompt=ids,
                                           greedy_tokens=FIDELITY_GREEDY_TOKENS)

    labels = [label for label in ("bf16", "int8", "fp8") if label in ready]
    results = dict(zip(labels, await asyncio.gather(*(query(label) for label in labels))))
    # Control: bf16 against itself (a second pass: greedy from its prefix cache, scored prefilled anew): the noise floor.
    results["bf16-repeat"] = await query("bf16")
    # Kept before any comparison: a comparison that fails must not lose what the servers said.
    (work / "fidelity-raw.json").write_text(json.dumps({k: [dataclasses.asdict(r) for r in v] for k, v in results.items()}))
    out = {"prompts": len(prompts), "prompt_tokens": FIDELITY_PROMPT_TOKENS, "greedy_tokens": FIDELITY_GREEDY_TOKENS,
           "sample_ids": FIDELITY_SAMPLE_IDS, "vocab_size": vocab, "reference": "bf16", "compare": {}}
    for label in ("int8", "fp8", "bf16-repeat"):
        if label in results:
            out["compare"][label] = fidelity.compare(results["bf16"], results[label], vocab_size=vocab)
    log("fidelity: " + json.dumps({k: {m: v.get(m) for m in ("mean_kl", "greedy_agreement", "errors")}
                                   for k, v in out["compare"].items()}))
    return out


def arm_order(ready: list[str], length: int, conc: int, repeat: int = 0) -> list[str]:
    """The arms of one cell in the order they run: rotated by prompt-length index + concurrency index
    + repeat, a Latin square over the grid, so each arm goes first once per concurrency level across the
    lengths and once per length across the levels. (A rotation by cell count has period 3 over 3
    levels: every c1 cell would run int8 first, every c4 fp8, every c16 bf16.)"""
    shift = (BENCH_LENGTHS.index(length) + BENCH_CONCURRENCY.index(conc) + repeat) % len(ready)
    return ready[shift:] + ready[:shift]


async def run_bench(servers: dict, ready: list[str], work: Path, clock: Clock, reserve_s: float,
                    cells_wanted: frozenset[tuple[int, int]] | None = None,
                    on_result: Callable[[dict], None] | None = None, repeats: int = 1) -> dict:
    """Cells of (prompt length, concurrency), all or cells_wanted, the whole set `repeats` times; within a
    cell the arms run one after another in arm_order, all sent the same prompts. An arm the budget no longer covers, at the
    last arm's seconds per prompt token, is skipped: a run that started bf16's 128K x c16 with 26 s left
    was killed with the cell's results unsent. on_result gets the results so far after every arm
    (the driver packs them)."""
    import httpx

    from builder.measure import client as bench

    cells, skipped = [], []
    result = {"cells": cells, "skipped": skipped, "repeats": repeats}
    s_per_token = 0.0
    async with httpx.AsyncClient(trust_env=False) as client:
        # Untimed: the first request of a server compiles its prefill kernels (on the H200, eager, the
        # first cell measured 1,347 ms TTFT for the arm that went first, ~110 ms for the others).
        for label in ready:
            warm = bench.Workload("warm-up", "concurrency", BENCH_LENGTHS[0], 4, 1, 1)
            try:
                await bench.run_workload(client, servers[label]["url"], servers[label]["cfg"].model.served_name, warm)
            except Exception as exc:
                log(f"bench warm-up {label}: {error_text(exc, 300)}")
        for repeat, (length, conc) in itertools.product(range(repeats), grid(cells_wanted)):
            order = arm_order(ready, length, conc, repeat)
            tokens = length * max(conc, 2)
            wl = cell_workload(length, conc)
            # One set of prompts per cell and pass, sent to every arm: the arms prefill the same tokens
            # (every server has its own prefix cache), and fitting 128K-token prompts is paid once.
            nonce, prompts = secrets.token_hex(4), None
            for label in order:
                if clock.left() < reserve_s + s_per_token * tokens:
                    skipped.append({"arm": label, "input_len": length, "concurrency": conc, "repeat": repeat,
                                    "reason": BUDGET_REASON, "estimated_s": round(s_per_token * tokens, 1)})
                    continue
                started = time.monotonic()  # the first arm's time includes the prompts: a safe estimate
                s = servers[label]
                try:
                    if prompts is None:  # built on this arm's server; if it fails there, the next arm tries
                        prompts = await bench.workload_prompts(client, s["url"], s["cfg"].model.served_name, wl,
                                                               nonce=nonce)
                    before = await bench.scrape(client, s["url"])
                    res = await bench.run_workload(client, s["url"], s["cfg"].model.served_name, wl, nonce=nonce,
                                                   prompts=prompts)
                    after = await bench.scrape(client, s["url"])
                    res["mtp_acceptance"] = bench.acceptance_rate(before, after)
                    res["kv_pool_tokens"] = bench.kv_pool_tokens(after)
                except Exception as exc:
                    res = {"workload": wl.name, "error": error_text(exc, 600)}
                res.update(arm=label, kv_cache_dtype=s["cfg"].kv_cache.dtype, position=order.index(label),
                           repeat=repeat)
                cells.append(res)
                again = f"-r{repeat}" if repeat else ""
                (work / f"bench-{label}-{wl.name}{again}.json").write_text(json.dumps(res, indent=2))
                log(f"bench {label} {wl.name}{again}: ttft {res.get('mean_ttft_ms', 0):.0f} ms, decode "
                    f"{res.get('mean_decode_tok_s', 0):.1f} tok/s, mtp {res.get('mtp_acceptance')}, "
                    f"ok {res.get('completed')}/{wl.num_prompts} {res.get('error', '')}")
                s_per_token = (time.monotonic() - started) / tokens  # the largest arm yet: closest to prefill-bound
                if on_result is not None:
                    on_result(result)
    return result


