"""A stand-in for the engine's OpenAI server, for driving the A/B end to end without a GPU or vLLM.

Started with the argv a launch plan renders (`-m vllm.entrypoints.openai.api_server ... --port N
--served-model-name NAME ... --profiler-config JSON`), it serves on 127.0.0.1:N what the A/B reads:
/health, /v1/models (NAME), /metrics (empty), /tokenize (one token per whitespace-separated word),
streamed /v1/completions (one SSE event per token, then usage, then [DONE]), and /start_profile +
/stop_profile, where stop writes a small gzip Chrome trace into the config's torch_profiler_dir: for
each request served while profiling, one prefill step and one decode step per further token (one
request per step: profile cells with one request at a time), each step with two kernels.

When EVENTS_ENV names a file, the stand-in appends a JSON line to it when it listens, when it could
not bind, and when it has closed its socket after SIGTERM: which servers were up at the same time.

`interpreter(folder)` writes the executable the transport runs as its python: `-c CODE` goes to this
interpreter, anything else starts the stand-in.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

EVENTS_ENV = "ENGINE_STAND_IN_EVENTS"
MAX_MODEL_LEN = 262144
#: Seconds between streamed tokens: small, but a request's decode time stays above zero.
TOKEN_S = 0.0005
STEP_US = 1000.0
KERNELS = (("fused_moe_kernel", 10.0, 400.0), ("_qsa_decode_int8_kernel", 420.0, 300.0))


def interpreter(folder: Path) -> Path:
    """An executable standing in for the engine's python: `-c` runs this python, the rest the stand-in."""
    path = folder / "engine-python"
    # By package name (the transport's PYTHONPATH holds the repo root): no test folder goes on sys.path.
    path.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
                    f'exec {sys.executable} -m {__spec__.name} "$@"\n')
    path.chmod(0o755)
    return path


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _option(argv: list[str], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else default


def _record(event: str, port: int, **extra) -> None:
    if path := os.environ.get(EVENTS_ENV):
        # The gather path's switch-interval variable as this process saw it (the A/B's -pyswitch arms).
        switch = os.environ.get("VLLM_PLE_MMAP_SWITCH_INTERVAL_US")
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "port": port, "pid": os.getpid(), "t": time.time(),
                                "switch_us": switch, **extra}) + "\n")


def trace_events(requests: list[tuple[int, int]]) -> list[dict]:
    """Steps and kernels of the (prompt tokens, completion tokens) requests served while profiling, as
    the engine's CUDA activity shows them: each step opens with the step kernel on a grid of requests + 1
    (the prefill kernel beside it where the step prefills), then two kernels, each launched by a host call
    tied to it by a correlation id."""
    out: list[dict] = []
    ts = 0.0
    corr = 0
    for prompt, completion in requests:
        for prefill in [True] + [False] * max(completion - 1, 0):
            kernels = [("_prepare_pos_seq_lens_kernel", 0.0, 2.0, [2, 1, 1])]
            kernels += [("_prepare_prefill_inputs_kernel", 3.0, 2.0, [1, 1, 1])] if prefill else []
            kernels += [(k, at, dur, [1, 1, 1]) for k, at, dur in KERNELS]
            for name, at, dur, grid in kernels:
                corr += 1
                out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + at - 5.0,
                            "dur": 4.0, "pid": 1, "tid": 1, "args": {"correlation": corr}})
                out.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts + at, "dur": dur, "pid": 0, "tid": 7,
                            "args": {"grid": grid, "correlation": corr}})
            ts += STEP_US
    return out


class StandIn:
    def __init__(self, argv: list[str]) -> None:
        self.port = int(_option(argv, "--port"))
        self.served = _option(argv, "--served-model-name", "stand-in")
        config = json.loads(_option(argv, "--profiler-config", "{}"))
        self.profile_dir = Path(config["torch_profiler_dir"]) if "torch_profiler_dir" in config else None
        self.profiling: list[tuple[int, int]] | None = None
        self.prefix = ""
        self.lock = threading.Lock()
        self.completions = 0  # every completion request answered, warm-ups included

    def stop_profile(self) -> None:
        with self.lock:
            served, self.profiling = self.profiling or [], None
        if self.profile_dir is None:
            return
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        name = f"{self.prefix}stand-in-{os.getpid()}.{time.time_ns()}.pt.trace.json.gz"
        doc = json.dumps({"traceEvents": trace_events(served)}).encode()
        (self.profile_dir / (name + ".tmp")).write_bytes(gzip.compress(doc))
        (self.profile_dir / (name + ".tmp")).rename(self.profile_dir / name)

    def handler(self):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, status: int, body, content_type: str = "application/json") -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, "", "text/plain")
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": outer.served, "object": "model", "max_model_len": MAX_MODEL_LEN}]})
                elif self.path == "/metrics":
                    self._send(200, "", "text/plain; version=0.0.4")
                else:
                    self._send(404, {"error": f"no {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/tokenize":
                    self._send(200, {"count": len(str(body.get("prompt", "")).split()), "max_model_len": MAX_MODEL_LEN})
                elif self.path == "/v1/completions":
                    self.complete(body)
                elif self.path == "/start_profile":
                    with outer.lock:
                        outer.profiling, outer.prefix = [], str(body.get("profile_prefix", ""))
                    self._send(200, {})
                elif self.path == "/stop_profile":
                    outer.stop_profile()
                    self._send(200, {})
                else:
                    self._send(404, {"error": f"no {self.path}"})

            def complete(self, body: dict) -> None:
                prompt, n = len(str(body.get("prompt", "")).split()), int(body.get("max_tokens", 16))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # no length: the body ends when the connection closes
                for i in range(n):
                    time.sleep(TOKEN_S)
                    chunk = {"object": "text_completion", "model": outer.served, "choices": [
                        {"index": 0, "text": f" w{i}", "finish_reason": "length" if i == n - 1 else None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
                self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
                with outer.lock:
                    outer.completions += 1
                    if outer.profiling is not None:
                        outer.profiling.append((prompt, n))

            def log_message(self, *args) -> None:
                pass

        return Handler

    def serve(self) -> int:
        try:
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self.handler())
        except OSError as exc:
            _record("bind_failed", self.port)
            print(f"stand-in: cannot bind 127.0.0.1:{self.port}: {exc}", flush=True)
            return 1
        httpd.daemon_threads = True
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
        _record("listening", self.port)
        print(f"stand-in: serving {self.served} on 127.0.0.1:{self.port}", flush=True)
        httpd.serve_forever()
        httpd.server_close()
        _record("closed", self.port, completions=self.completions)
        return 0


if __name__ == "__main__":
    sys.exit(StandIn(sys.argv[1:]).serve())
