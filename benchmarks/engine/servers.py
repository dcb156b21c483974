"""The servers of a measurement: the small model they serve, one OpenAI server per KV-dtype arm rendered
from targets/h200-small.toml's launch plan, waiting for them, stopping them, and reading their logs.

Every process starts with the transport's interpreter and environment (`Transport.python`, `.env()`),
so the same code serves from a landed payload on a remote GPU host or from a local venv. Imports only
the standard library at module level: the chunked transport's `land` uses the model generator before
any wheel is installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

TARGET = "h200-small"
#: (label, --kv-cache-dtype, port): int8 is the release's, fp8 the alternative, auto = bf16.
ARMS = (("int8", "int8_per_token_head", 8101), ("fp8", "fp8", 8102), ("bf16", "auto", 8103))
#: --layout: the GPU split, taken from the target that ships it (None: h200-small's own, one GPU),
#: and the arms it runs. tp2-ep is cmp170hx-x2's TP2 + expert parallel, on two H200s.
LAYOUTS = {"tp1": (None, ARMS), "tp2-ep": ("cmp170hx-x2", (ARMS[0], ARMS[2]))}
#: The retry when the checkpoint itself failed to load: dummy weights, and the PLE table pinned (the
#: last --engram-config wins), since the ple-mmap patch maps rows from a checkpoint dummy has not.
DUMMY_RETRY_ARGS = ("--load-format", "dummy", "--engram-config", '{"cpu_offload": true}')
#: Every harness server logs the traceback behind an HTTP 500: without it vLLM 0.33 answers a failed
#: request with an empty EngineGenerateError and logs nothing (as json_mode's HTTP 500s on the H200 did).
DIAGNOSTIC_ARGS = ("--log-error-stack",)
#: benchmarks.engine.model.MARKER (not imported: it needs pydantic, which `land` has not installed yet).
MODEL_MARKER = "qfn-small-model.json"
LOG_TAIL_LINES = 300
#: A server log's first lines: its start-up timeline (what took the ~200 s to ready).
LOG_HEAD_LINES = 150


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# the model


def model_ready(state: Path) -> bool:
    return (state / "model" / MODEL_MARKER).is_file()


def start_model(transport) -> None:
    """Generate the model in its own session, so it outlives the command that started it (on a remote
    GPU host the next command finds it running or done)."""
    state = transport.state
    if model_ready(state) or (state / "model.pid").is_file():
        return
    state.mkdir(parents=True, exist_ok=True)
    with (state / "model.log").open("w") as out:
        proc = subprocess.Popen(
            [transport.python, "-m", "benchmarks.engine.model", "--tokenizer", str(transport.tokenizer),
             "--out", str(state / "model"), "--seed", "0"],
            # cwd outside the repo tree: a later command may replace that tree under a running process.
            cwd=state, env=transport.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    (state / "model.pid").write_text(f"{proc.pid}\n")


def wait_model(transport, limit_s: float) -> None:
    """Until the model's marker is written; a generator that died is started once more."""
    state = transport.state
    deadline = time.monotonic() + limit_s
    while not model_ready(state):
        pid_file = state / "model.pid"
        alive = pid_file.is_file() and Path(f"/proc/{pid_file.read_text().strip()}").exists()
        if not alive and not (state / "model.retried").is_file():
            (state / "model.retried").write_text(tail(state / "model.log", 20))
            pid_file.unlink(missing_ok=True)
            start_model(transport)
            continue
        if not alive:
            raise RuntimeError(f"model generation ended without its marker: {tail(state / 'model.log', 20)}")
        if time.monotonic() > deadline:
            raise RuntimeError("model generation still running at its time limit")
        time.sleep(1)


# ---------------------------------------------------------------------------------------------
# the servers


def layout_arms(layout: str) -> tuple[str, ...]:
    """The labels of a layout's arms, in its order."""
    return tuple(label for label, _, _ in LAYOUTS[layout][1])


def layout_gpus(layout: str) -> int:
    """The GPUs a layout needs: those of the target its split comes from (the local transport checks them
    before starting anything)."""
    from builder.config import load_target

    return load_target(LAYOUTS[layout][0] or TARGET).target.gpu_count


def arm_config(base, *, kv_dtype: str, port: int, layout: str = "tp1", graphs: bool = False,
               mtp_k: int | None = None, max_num_seqs: int | None = None):
    """The target's config with one KV dtype and port (and the layout's GPU split; CUDA graphs on
    with `graphs`; `mtp_k` draft tokens instead of the target's, 0 for none; `max_num_seqs`), validated
    by the same rules as any target."""
    from builder.config import load_target, parse_config

    data = base.model_dump(mode="json")
    data["kv_cache"]["dtype"] = kv_dtype
    data["kv_cache"]["scale_layout"] = "side" if kv_dtype == "int8_per_token_head" else None
    data["server"]["port"] = port
    if graphs:
        data["server"]["enforce_eager"] = False
    if mtp_k is not None:
        data["speculative"] = {"method": "mtp", "num_speculative_tokens": mtp_k} if mtp_k else {}
    if max_num_seqs is not None:
        data["server"]["max_num_seqs"] = max_num_seqs
    split_from = LAYOUTS[layout][0]
    if split_from:
        split = load_target(split_from)
        data["parallel"] = split.parallel.model_dump(mode="json") | {
            "distributed_executor_backend": data["parallel"]["distributed_executor_backend"]}
        data["target"]["gpu_count"] = split.target.gpu_count
    extras = f"{', graphs' if graphs else ''}{f', MTP k={mtp_k}' if mtp_k is not None else ''}"
    return parse_config(data, source=f"{TARGET} ({kv_dtype} KV, port {port}, {layout}{extras})")


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


def start_servers(transport, *, work: Path, extra_args: list[str], attempt: str, layout: str = "tp1",
                  graphs: bool = False, only: tuple[str, ...] | None = None, mtp_k: int | None = None,
                  max_num_seqs: int | None = None, extra_env: dict[str, str] | None = None) -> dict:
    """The layout's arms (or `only` those), each its own server in its own session; `extra_env` goes
    over the launch plan's environment."""
    from builder.config import launch_plan, load_target

    state = transport.state
    base = load_target(TARGET)
    servers = {}
    for label, dtype, port in LAYOUTS[layout][1]:
        if only is not None and label not in only:
            continue
        cfg = arm_config(base, kv_dtype=dtype, port=port, layout=layout, graphs=graphs, mtp_k=mtp_k,
                         max_num_seqs=max_num_seqs)
        plan = launch_plan(cfg)
        # The plan says `python3`; the servers run the transport's interpreter, the one with the engine.
        argv = [transport.python, *plan.argv(model_path=str(state / "model"))[1:], *DIAGNOSTIC_ARGS, *extra_args]
        env = transport.env(graphs=graphs)
        env.update({e.name: e.value for e in plan.env})
        env.update(required_dirs(plan, state))
        env.update(extra_env or {})
        logf = work / f"server-{label}-{attempt}.log"  # one per attempt: a retry keeps the first cause
        proc = subprocess.Popen(argv, env=env, stdout=logf.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=state)
        servers[label] = {"cfg": cfg, "plan": plan, "argv": argv, "proc": proc, "log": logf,
                          "url": f"http://127.0.0.1:{port}", "env": [e.model_dump() for e in plan.env]}
        log(f"started {label}: {' '.join(argv)}")
    return servers


def wait_servers(servers: dict, timeout_s: float) -> dict[str, str]:
    """builder.serve.wait on each server at once; returns label -> 'ready' or the failure."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.console import Console

    # builder.serve.wait needs httpx only (builder.serve loads its docker tooling lazily).
    from builder.errors import ServeError
    from builder.serve.wait import wait_ready

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


# ---------------------------------------------------------------------------------------------
# the logs


def head_and_tail(path: Path, *, head: int = LOG_HEAD_LINES, tail_n: int = LOG_TAIL_LINES) -> str:
    lines = path.read_text(errors="replace").splitlines()
    if len(lines) <= head + tail_n:
        return "\n".join(lines)
    return "\n".join([*lines[:head], f"[... {len(lines) - head - tail_n} lines left out ...]", *lines[-tail_n:]])


def keep_tails(servers: dict) -> None:
    """Each server log shrinks to its start-up and its end (for a transport that returns little)."""
    for s in servers.values():
        log_path = s["log"]
        if log_path.is_file():
            log_path.with_suffix(".tail.log").write_text(head_and_tail(log_path))
            log_path.unlink()


def root_cause(log_path: Path) -> list[str]:
    """The exception lines of a server log ('XxxError: ...'), the first thing to read when it died."""
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


def triton_in_use(transport) -> str:
    """The Triton the servers import (version and where), with the transport's interpreter and environment."""
    done = subprocess.run([transport.python, "-c", "import triton; print(triton.__version__, triton.__file__)"],
                          env=transport.env(), capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else f"import failed: {done.stderr.strip()[-300:]}"


def server_summary(servers: dict, states: dict[str, str]) -> dict:
    return {k: {"state": v, "argv": servers[k]["argv"], "env": servers[k]["env"], "ready_s": servers[k].get("ready_s"),
                "root_cause": root_cause(servers[k]["log"])} for k, v in states.items()}


def host_facts() -> dict:
    """The machine a run measured on: GPU, driver, clocks it may run at, persistence, CPUs, kernel."""
    import platform

    facts: dict = {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    query = "name,driver_version,clocks.max.sm,clocks.max.mem,clocks.applications.graphics,persistence_mode,power.limit"
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30)
        facts["gpus"] = [dict(zip(query.split(","), (x.strip() for x in line.split(","))))
                         for line in done.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired) as exc:
        facts["gpus"] = f"nvidia-smi: {exc}"
    return facts
