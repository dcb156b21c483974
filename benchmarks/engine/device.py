#!/usr/bin/env python3
"""Device driver of the engine harness: runs on the H200 with its own python3.

  python3 device.py land    --carried DIR --state /tmp/e18
  python3 device.py measure --carried DIR --state /tmp/e18 --out $OUT --budget-s 510
      [--phases gates,fidelity,bench] [--layout tp1|tp2-ep] [--graphs] [--bench-cells LENxCONC,...] [--bench-repeats N]

`land` (every call) checks and lands the pieces the call carried, unpacks what they complete,
installs the locked wheels into state/site and starts the model generator in its own session
(it outlives the call while the machine stays warm). `measure` (the last call) lands the rest,
renders targets/h200-small.toml's launch plan once per KV dtype, starts the three OpenAI servers
together from it, waits with builder.serve.wait, then, in order and while the budget lasts:
the gates that mean something with random weights (kv_pool, determinism, prefix_cache,
api_surface), the fidelity comparison against bf16 KV, and the benchmark grid (prompt length x
concurrency, arms interleaved, MTP acceptance from /metrics). Everything lands under $OUT in a few files.
--layout tp2-ep serves int8 and bf16 with cmp170hx-x2's TP2 + EP split (two GPUs); --graphs turns
CUDA graphs on with the carried nvidia-cutlass-dsl (`prepare --graphs`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.engine import land as landing  # noqa: E402  (stdlib only)
from builder.constants import LAUNCH_TEMPLATES_DIR  # noqa: E402  (stdlib only; resolves inside the run tree)

MANIFEST = "manifest.json"
TARGET = "h200-small"
#: (label, --kv-cache-dtype, port): int8 is the release's, fp8 the alternative, auto = bf16.
ARMS = (("int8", "int8_per_token_head", 8101), ("fp8", "fp8", 8102), ("bf16", "auto", 8103))
#: --layout: the GPU split, taken from the target that ships it (None: h200-small's own, one GPU),
#: and the arms it runs. tp2-ep is cmp170hx-x2's TP2 + expert parallel, on the two-H200 kind.
LAYOUTS = {"tp1": (None, ARMS), "tp2-ep": ("cmp170hx-x2", (ARMS[0], ARMS[2]))}
#: The gates that mean something with random weights, in order; api_surface last, since a check that
#: kills an engine (what that gate is for) would otherwise take the other gates with it.
GATES = ("kv_pool", "determinism", "prefix_cache", "api_surface")
#: The retry when the checkpoint itself failed to load: dummy weights, and the PLE table pinned (the
#: last --engram-config wins), since the ple-mmap patch maps rows from a checkpoint dummy has not.
DUMMY_RETRY_ARGS = ("--load-format", "dummy", "--engram-config", '{"cpu_offload": true}')
#: Every harness server logs the traceback behind an HTTP 500: without it vLLM 0.33 answers a failed
#: request with an empty EngineGenerateError and logs nothing (as json_mode's HTTP 500s on the H200 did).
DIAGNOSTIC_ARGS = ("--log-error-stack",)
#: What `measure` runs once the servers are ready, in this order.
PHASES = ("gates", "fidelity", "bench")
FIDELITY_PROMPTS = 100
#: Longer than the QSA budget (2048 selected tokens), so the sparse selection is active.
FIDELITY_PROMPT_TOKENS = 3072
FIDELITY_GREEDY_TOKENS = 32
FIDELITY_SAMPLE_IDS = 128
BENCH_LENGTHS = (8192, 32768, 131072)
BENCH_CONCURRENCY = (1, 4, 16)
BENCH_OUTPUT_TOKENS = 64
LOG_TAIL_LINES = 300
#: A server log's first lines: its start-up timeline (what took the ~200 s to ready).
LOG_HEAD_LINES = 150
#: Triton's compile cache, under state/ so `measure` can send it back ($OUT) and a later fresh
#: machine start from it: a cold cache costs each start ~140 s (H200, eager: 208 s to ready cold, 65 s warm).
TRITON_CACHE = "triton-cache"
CACHE_ARCHIVE = "triton-cache.tar.xz"
#: The remote runner takes back 16 MiB a file.
CACHE_RETURN_BYTES = 15 << 20
#: benchmarks.engine.model.MARKER (not imported: land runs before pydantic is installed).
MODEL_MARKER = "qfn-small-model.json"
#: Where `land` installs the graphs-wheels component (nvidia-cutlass-dsl), apart from state/site.
GRAPHS_SITE = "site-graphs"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# land


def python_env(state: Path, *, graphs: bool = False) -> dict[str, str]:
    """The device python with the carried wheels and the engine tree in front of its own packages,
    and the launch folder, as the rendered launch script sets it (the plan's --middleware lives there).
    `graphs` adds nvidia-cutlass-dsl (state/site-graphs); without it the engine never imports cutlass."""
    paths = [*(site_paths(state / GRAPHS_SITE) if graphs else []), str(state / "site"), str(state / "engine"), str(REPO),
             str(LAUNCH_TEMPLATES_DIR)]
    env = dict(os.environ)
    triton = state / landing.DESTINATIONS["triton.tar.xz"]
    if (triton / "triton" / "__init__.py").is_file():
        # The carried lock Triton before the device's own; its trimmed tree registers the NVIDIA
        # backend in-tree (no entry points), as benchmarks/kernel_evidence.sh runs it.
        paths.insert(0, str(triton))
        env["TRITON_BACKENDS_IN_TREE"] = "1"
    env["PYTHONPATH"] = ":".join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["QFN_REPO_ROOT"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    env["TRITON_CACHE_DIR"] = str(state / TRITON_CACHE)
    return env


def triton_in_use(state: Path) -> str:
    """The Triton the servers import (version and where), as python_env sets them up."""
    done = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__, triton.__file__)"],
                          env=python_env(state), capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else f"import failed: {done.stderr.strip()[-300:]}"


def site_paths(site_dir: Path) -> list[str]:
    """site_dir and what its .pth files add. A PYTHONPATH entry skips .pth files, and
    nvidia-cutlass-dsl puts `cutlass` on the path only through one (without it every graphs server dies on
    No module named 'cutlass')."""
    code = ("import site, sys; before = set(sys.path); site.addsitedir(sys.argv[1]); "
            "print('\\n'.join(p for p in sys.path if p not in before))")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(site_dir)], capture_output=True, text=True, check=True)
    added = [p for p in out.stdout.splitlines() if p]
    return [str(site_dir), *(p for p in added if p != str(site_dir))]


def install_wheels(state: Path, *, wheels_dir: str = "wheels", site: str = "site") -> bool:
    """Install the landed wheels into state/site once; the stamp names them. A state whose site was
    installed from another carry's wheels is refused: a new wheels.tar unpacks beside the old
    wheels, and a skipped install would serve the old packages without a word."""
    stamp = state / site / ".installed"
    wheels = sorted((state / wheels_dir).glob("*.whl"))
    names = "".join(f"{w.name}\n" for w in wheels)
    if stamp.is_file():
        if stamp.read_text() != names:
            raise RuntimeError(f"{state / site} was installed from other wheels than {state / wheels_dir} holds now "
                               "(another carry landed on this state): measure with a fresh --state")
        return True
    if not wheels:
        return False
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--upgrade", "--target", str(state / site), *map(str, wheels)]
    subprocess.run(cmd, check=True)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(names)
    return True


def model_ready(state: Path) -> bool:
    return (state / "model" / MODEL_MARKER).is_file()


def start_model(state: Path) -> None:
    """Generate the model in its own session so it outlives this call (the machine stays warm)."""
    if model_ready(state) or (state / "model.pid").is_file():
        return
    with (state / "model.log").open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.engine.model", "--tokenizer", str(state / "tokenizer"),
             "--out", str(state / "model"), "--seed", "0"],
            # cwd outside the repo copy: the next call replaces that copy under a running process.
            cwd=state, env=python_env(state), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    (state / "model.pid").write_text(f"{proc.pid}\n")


def land(*, carried: Path, state: Path) -> dict:
    manifest = landing.read_manifest(carried / MANIFEST)
    state.mkdir(parents=True, exist_ok=True)
    got = landing.land_pieces(manifest=manifest, carried=carried, state=state)
    unpacked = landing.unpack_ready(manifest=manifest, state=state)
    log(f"landed {got}, unpacked {unpacked}")
    if install_wheels(state) and (state / "tokenizer" / "tokenizer.json").is_file():
        start_model(state)
    install_wheels(state, wheels_dir=landing.DESTINATIONS["graphs-wheels.tar"], site=GRAPHS_SITE)
    return landing.status(manifest=manifest, state=state)


# ---------------------------------------------------------------------------------------------
# measure


class Clock:
    def __init__(self, budget_s: float) -> None:
        self.start, self.budget = time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def wait_model(state: Path, clock: Clock, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not model_ready(state):
        pid_file = state / "model.pid"
        alive = pid_file.is_file() and Path(f"/proc/{pid_file.read_text().strip()}").exists()
        if not alive and not (state / "model.retried").is_file():
            (state / "model.retried").write_text(tail(state / "model.log", 20))
            pid_file.unlink(missing_ok=True)
            start_model(state)
            continue
        if not alive:
            raise RuntimeError(f"model generation ended without its marker: {tail(state / 'model.log', 20)}")
        if time.monotonic() > deadline:
            raise RuntimeError("model generation still running at its time limit")
        time.sleep(1)


def error_text(exc: BaseException, limit: int = 1500) -> str:
    """The exception and the last frames it passed through: a device run is too dear to lose a cause."""
    import traceback

    frames = "".join(traceback.format_tb(exc.__traceback__)[-3:])
    return f"{type(exc).__name__}: {exc}"[:limit // 2] + "\n" + frames[-(limit // 2):]


def tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def arm_config(base, *, kv_dtype: str, port: int, layout: str = "tp1", graphs: bool = False):
    """The target's config with one KV dtype and port (and the layout's GPU split; CUDA graphs on
    with `graphs`), validated by the same rules as any target."""
    from builder.config import load_target, parse_config

    data = base.model_dump(mode="json")
    data["kv_cache"]["dtype"] = kv_dtype
    data["kv_cache"]["scale_layout"] = "side" if kv_dtype == "int8_per_token_head" else None
    data["server"]["port"] = port
    if graphs:
        data["server"]["enforce_eager"] = False
    split_from = LAYOUTS[layout][0]
    if split_from:
        split = load_target(split_from)
        data["parallel"] = split.parallel.model_dump(mode="json") | {
            "distributed_executor_backend": data["parallel"]["distributed_executor_backend"]}
        data["target"]["gpu_count"] = split.target.gpu_count
    return parse_config(data, source=f"{TARGET} ({kv_dtype} KV, port {port}, {layout}{', graphs' if graphs else ''})")


def required_dirs(plan, state: Path) -> dict[str, str]:
    """A folder under state/ for each folder the launch requires besides the model (as a user of the
    launch script gives one), e.g. VLLM_PLE_MMAP_TABLE_DIR for a table that cannot map in place."""
    dirs = {}
    for r in plan.required:
        if r.is_dir and r.env != "MODEL_DIR":
            path = state / "inputs" / r.env.lower()
            path.mkdir(parents=True, exist_ok=True)
            dirs[r.env] = str(path)
    return dirs


def start_servers(*, state: Path, work: Path, extra_args: list[str], attempt: str, layout: str = "tp1",
                  graphs: bool = False) -> dict:
    from builder.config import launch_plan, load_target

    base = load_target(TARGET)
    servers = {}
    for label, dtype, port in LAYOUTS[layout][1]:
        cfg = arm_config(base, kv_dtype=dtype, port=port, layout=layout, graphs=graphs)
        plan = launch_plan(cfg)
        # The plan says `python3`; the interpreter running this driver is the device's torch one.
        argv = [sys.executable, *plan.argv(model_path=str(state / "model"))[1:], *DIAGNOSTIC_ARGS, *extra_args]
        env = python_env(state, graphs=graphs)
        env.update({e.name: e.value for e in plan.env})
        env.update(required_dirs(plan, state))
        logf = work / f"server-{label}-{attempt}.log"  # one per attempt: a retry keeps the first cause
        proc = subprocess.Popen(argv, env=env, stdout=logf.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=state)
        servers[label] = {"cfg": cfg, "plan": plan, "argv": argv, "proc": proc, "log": logf,
                          "url": f"http://127.0.0.1:{port}", "env": [e.model_dump() for e in plan.env]}
        log(f"started {label}: {' '.join(argv)}")
    return servers


def _serve_wait():
    """builder.serve.wait: httpx only (builder.serve loads its docker tooling lazily, which the
    device does not need to wait on a port)."""
    import builder.serve.wait

    return builder.serve.wait


def wait_servers(servers: dict, timeout_s: float) -> dict[str, str]:
    """builder.serve.wait on each server at once; returns label -> 'ready' or the failure."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.console import Console

    from builder.errors import ServeError

    wait_ready = _serve_wait().wait_ready

    def one(label: str) -> str:
        s = servers[label]

        def alive() -> None:
            if s["proc"].poll() is not None:
                raise ServeError(f"{label} server exited with {s['proc'].returncode}", hint=tail(s["log"], 30))

        try:
            ready = wait_ready(url=s["url"], served_name=s["cfg"].model.served_name, timeout_s=timeout_s,
                               alive=alive, console=Console(stderr=True, width=200))
            s["ready_s"] = ready.seconds
            return "ready"
        except ServeError as exc:
            return f"failed: {exc.message}"

    with ThreadPoolExecutor(len(servers)) as pool:
        return dict(zip(servers, pool.map(one, servers)))


def stop_servers(servers: dict) -> None:
    import signal

    for s in servers.values():
        if s["proc"].poll() is None:
            try:
                os.killpg(s["proc"].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for s in servers.values():
        try:
            s["proc"].wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(s["proc"].pid, signal.SIGKILL)


def head_and_tail(path: Path, *, head: int = LOG_HEAD_LINES, tail_n: int = LOG_TAIL_LINES) -> str:
    lines = path.read_text(errors="replace").splitlines()
    if len(lines) <= head + tail_n:
        return "\n".join(lines)
    return "\n".join([*lines[:head], f"[... {len(lines) - head - tail_n} lines left out ...]", *lines[-tail_n:]])


def keep_tails(servers: dict, work: Path) -> None:
    """Each server log shrinks to its start-up and its end (the remote runner takes back 16 MiB a file)."""
    for s in servers.values():
        log_path = s["log"]
        if log_path.is_file():
            log_path.with_suffix(".tail.log").write_text(head_and_tail(log_path))
            log_path.unlink()


def restore_cache(archive: Path | None, state: Path) -> int:
    """Unpack a carried Triton cache into a machine that has none; the number of files it holds."""
    import tarfile

    dest = state / TRITON_CACHE
    if archive is None or not archive.is_file() or dest.exists():
        return 0
    with tarfile.open(archive) as tar:
        tar.extractall(state, filter="data")
    return sum(1 for f in dest.rglob("*") if f.is_file())


def save_cache(state: Path, out: Path) -> dict:
    """The machine's Triton cache as $OUT/triton-cache.tar.xz, when it fits what the remote runner takes back."""
    src = state / TRITON_CACHE
    files = sum(1 for f in src.rglob("*") if f.is_file()) if src.is_dir() else 0
    if not files:
        return {"files": 0}
    tmp = out / (CACHE_ARCHIVE + ".part")
    if shutil.which("tar") and shutil.which("xz"):  # all cores
        subprocess.run(["tar", "-C", str(state), "-cJf", str(tmp), TRITON_CACHE], check=True,
                       env={**os.environ, "XZ_OPT": "-T0 -6"})
    else:  # one core, but nothing the machine may lack
        import tarfile

        with tarfile.open(tmp, "w:xz", preset=3) as tar:
            tar.add(src, arcname=TRITON_CACHE)
    size = tmp.stat().st_size
    if size > CACHE_RETURN_BYTES:
        tmp.unlink()
        return {"files": files, "bytes": size, "returned": False}
    tmp.rename(out / CACHE_ARCHIVE)
    return {"files": files, "bytes": size, "returned": True}


def root_cause(log_path: Path) -> list[str]:
    """The exception lines of a server log ('XxxError: ...'), the first thing to read when it died."""
    import re

    lines = []
    for line in tail(log_path, 2000).splitlines():
        text = re.sub(r"^\(.*?\) (ERROR|WARNING|INFO) [^\]]*\] ", "", line).strip()
        if re.match(r"^[A-Za-z_.]*(Error|Exception)(:|$)", text) and text not in lines:
            lines.append(text[:400])
    return lines[-5:]


def weight_load_failed(causes: list[str]) -> bool:
    """The checkpoint, not the engine, is what failed: names or shapes vLLM's loader refused."""
    markers = ("were not initialized from checkpoint", "has no parameter", "KeyError", "size mismatch",
               "Unexpected", "shape")
    return any(m in c for c in causes for m in markers)


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
        for repeat, length, conc in itertools.product(range(repeats), BENCH_LENGTHS, BENCH_CONCURRENCY):
            if cells_wanted is not None and (length, conc) not in cells_wanted:
                continue
            order = arm_order(ready, length, conc, repeat)
            tokens = length * max(conc, 2)
            wl = bench.Workload(f"in{length}-c{conc}", "concurrency", length, BENCH_OUTPUT_TOKENS, max(conc, 2), conc)
            # One set of prompts per cell and pass, sent to every arm: the arms prefill the same tokens
            # (every server has its own prefix cache), and fitting 128K-token prompts is paid once.
            nonce, prompts = secrets.token_hex(4), None
            for label in order:
                if clock.left() < reserve_s + s_per_token * tokens:
                    skipped.append({"arm": label, "input_len": length, "concurrency": conc, "repeat": repeat,
                                    "reason": "device budget", "estimated_s": round(s_per_token * tokens, 1)})
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


def parse_phases(text: str) -> tuple[str, ...]:
    """'gates,bench' -> ('gates', 'bench'); refuses an empty list or a phase not in PHASES."""
    phases = tuple(x for x in text.split(",") if x)
    if not phases or set(phases) - set(PHASES):
        raise ValueError(f"choose from {','.join(PHASES)}, got {text!r}")
    return phases


def parse_bench_cells(text: str) -> frozenset[tuple[int, int]] | None:
    """'131072x4,131072x16' -> {(131072, 4), (131072, 16)}; '' -> None (every cell)."""
    if not text.strip():
        return None
    grid = {(n, c) for n in BENCH_LENGTHS for c in BENCH_CONCURRENCY}
    cells = set()
    for item in filter(None, (x.strip() for x in text.split(","))):
        length, sep, conc = item.partition("x")
        if not sep or not length.isdigit() or not conc.isdigit() or (int(length), int(conc)) not in grid:
            raise ValueError(f"{item!r} is not a grid cell; choose LENxCONC with LEN in {BENCH_LENGTHS} "
                             f"and CONC in {BENCH_CONCURRENCY}")
        cells.add((int(length), int(conc)))
    return frozenset(cells)


def pack(out: Path, work: Path, summary: dict) -> None:
    """Everything into $OUT/results.tar.gz plus summary.json (the remote runner takes back 8 files)."""
    import tarfile

    (work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    tmp = out / "results.tar.gz.part"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(work, arcname="results")
    tmp.rename(out / "results.tar.gz")


def fresh_results(state: Path) -> Path:
    """state/results, empty: an earlier measure's on this warm machine moves to results-N beside it
    (its files would otherwise go back again inside this run's results.tar.gz)."""
    work = state / "results"
    if work.exists():
        n = 1
        while (state / f"results-{n}").exists():
            n += 1
        work.rename(state / f"results-{n}")
    work.mkdir(parents=True)
    return work


def measure(*, carried: Path, state: Path, out: Path, budget_s: float, phases: tuple[str, ...] = PHASES,
            layout: str = "tp1", graphs: bool = False, triton_cache: Path | None = None,
            bench_cells: frozenset[tuple[int, int]] | None = None, bench_repeats: int = 1) -> int:
    import asyncio

    clock = Clock(budget_s)
    work = fresh_results(state)
    summary: dict = {"target": TARGET, "layout": layout, "graphs": graphs, "budget_s": budget_s, "phases": {}}
    status = land(carried=carried, state=state)
    summary["land"] = status
    summary["triton"] = triton_in_use(state)
    summary["triton_cache"] = {}
    sys.path[:0] = [str(state / "site"), str(state / "engine")]  # builder needs the carried pydantic
    servers: dict = {}
    try:
        if len(status["pieces_landed"]) != status["pieces_total"] or len(status["components_unpacked"]) != status["components_total"]:
            raise RuntimeError(f"carry incomplete: {status}")
        summary["triton_cache"]["restored_files"] = restore_cache(triton_cache, state)
        if graphs and not (state / GRAPHS_SITE / ".installed").is_file():
            raise RuntimeError("--graphs needs nvidia-cutlass-dsl in the carry: run `prepare --graphs`")
        wait_model(state, clock, limit_s=min(180, clock.left() - 60))
        summary["model"] = json.loads((state / "model" / MODEL_MARKER).read_text())
        summary["phases"]["model_ready_s"] = clock.elapsed()
        extra: list[str] = []
        for attempt in ("checkpoint", "dummy"):
            servers = start_servers(state=state, work=work, extra_args=extra, attempt=attempt, layout=layout,
                                    graphs=graphs)
            # What is left after ready is for the phases: gates alone take ~85 s for three arms.
            states = wait_servers(servers, timeout_s=max(30.0, clock.left() - (90 if "gates" in phases else 40)))
            summary.setdefault("attempts", {})[attempt] = {
                k: {"state": v, "argv": servers[k]["argv"], "env": servers[k]["env"], "ready_s": servers[k].get("ready_s"),
                    "root_cause": root_cause(servers[k]["log"])} for k, v in states.items()}
            summary["weights"] = attempt
            summary["phases"]["servers_ready_s"] = clock.elapsed()
            log(f"servers ({attempt} weights): {states}")
            ready = [k for k, v in states.items() if v == "ready"]
            if ready or attempt == "dummy" or not all(weight_load_failed(root_cause(s["log"])) for s in servers.values()):
                break
            stop_servers(servers)
            keep_tails(servers, work)
            extra = list(DUMMY_RETRY_ARGS)  # the checkpoint did not load: measure the engine anyway
        pack(out, work, summary)
        if not ready:
            raise RuntimeError("no server became ready")
        if "gates" in phases:
            summary["gates"] = asyncio.run(run_gates(servers, ready, work, state / "model"))
            summary["phases"]["gates_s"] = clock.elapsed()
            summary["determinism_probe"] = asyncio.run(probe_determinism(servers, ready, summary["gates"]))
            summary["phases"]["determinism_probe_s"] = clock.elapsed()
            pack(out, work, summary)
        if "fidelity" in phases and clock.left() > 30:
            try:
                summary["fidelity"] = asyncio.run(run_fidelity(servers, ready, state / "model", work))
            except Exception as exc:
                summary["fidelity"] = {"error": error_text(exc)}
            summary["phases"]["fidelity_s"] = clock.elapsed()
            pack(out, work, summary)
        if "bench" in phases:
            def pack_bench(so_far: dict) -> None:  # what the bench measured survives a call killed mid-cell
                summary["bench"] = so_far
                pack(out, work, summary)

            summary["bench"] = asyncio.run(run_bench(servers, ready, work, clock, reserve_s=25, cells_wanted=bench_cells,
                                                     on_result=pack_bench, repeats=bench_repeats))
            summary["phases"]["bench_s"] = clock.elapsed()
        return 0
    except Exception as exc:
        summary["error"] = error_text(exc, 3000)
        log(f"ERROR {summary['error']}")
        return 1
    finally:
        stop_servers(servers)
        keep_tails(servers, work)
        try:
            summary["triton_cache"]["saved"] = save_cache(state, out)
        except (OSError, subprocess.CalledProcessError) as exc:
            summary["triton_cache"]["saved"] = {"error": error_text(exc)}
        (work / "model.log").write_text(tail(state / "model.log", 50))
        summary["phases"]["total_s"] = clock.elapsed()
        pack(out, work, summary)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["land", "measure"])
    p.add_argument("--carried", type=Path, required=True, help="the carried dir holding manifest.json and pieces")
    p.add_argument("--state", type=Path, default=Path("/tmp/e18"), help="kept between warm calls")
    p.add_argument("--out", type=Path, help="measure: where results go ($OUT)")
    p.add_argument("--budget-s", type=float, default=510.0, help="measure: stop starting new work after this")
    p.add_argument("--layout", choices=list(LAYOUTS), default="tp1",
                   help="measure: tp2-ep serves int8 and bf16 with cmp170hx-x2's TP2 + EP (kind nvidia-h200-x2)")
    p.add_argument("--graphs", action="store_true",
                   help="measure: CUDA graphs on (enforce_eager off), with the carried nvidia-cutlass-dsl")
    p.add_argument("--triton-cache", type=Path,
                   help="measure: a triton-cache.tar.xz an earlier measure call wrote to $OUT (unpacked if none is here)")
    p.add_argument("--phases", default=",".join(PHASES),
                   help=f"measure: which of {','.join(PHASES)} to run after ready (a short device budget picks)")
    p.add_argument("--bench-cells", default="",
                   help="measure: only these bench cells, LENxCONC comma list (e.g. 131072x4,131072x16); default all")
    p.add_argument("--bench-repeats", type=int, default=1,
                   help="measure: run the bench cells this many times (arm order shifted each time), to see run-to-run spread")
    args = p.parse_args(argv)
    if not (args.carried / MANIFEST).is_file():
        p.error(f"--carried {args.carried} has no {MANIFEST}")
    if args.command == "land":
        print(json.dumps(land(carried=args.carried, state=args.state)))
        return 0
    if args.out is None:
        p.error("measure needs --out")
    if args.budget_s <= 0:
        p.error("--budget-s must be positive")
    if args.bench_repeats < 1:
        p.error(f"--bench-repeats must be 1 or more, got {args.bench_repeats}")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        phases = parse_phases(args.phases)
    except ValueError as exc:
        p.error(f"--phases: {exc}")
    try:
        cells = parse_bench_cells(args.bench_cells)
    except ValueError as exc:
        p.error(f"--bench-cells: {exc}")
    return measure(carried=args.carried, state=args.state, out=args.out, budget_s=args.budget_s, phases=phases,
                   layout=args.layout, graphs=args.graphs, triton_cache=args.triton_cache, bench_cells=cells,
                   bench_repeats=args.bench_repeats)


if __name__ == "__main__":
    sys.exit(main())
