"""The open-loop request-rate mode of the client: seeded Poisson arrivals, sending at those times
whatever is in flight, and goodput under TTFT/TPOT limits (`vllm bench serve --request-rate
--seed --goodput`)."""

from __future__ import annotations

import asyncio
import http.server
import json
import statistics
import threading
import time

import httpx
import pytest

from builder.measure import client as bench


def test_arrivals_are_seeded_start_at_zero_and_average_one_over_the_rate():
    a = bench.poisson_offsets(5000, 4.0, seed=7)
    assert a == bench.poisson_offsets(5000, 4.0, seed=7) and a != bench.poisson_offsets(5000, 4.0, seed=8)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.05)
    # exponential gaps: their spread equals their mean, unlike a fixed-interval sender's 0
    assert statistics.pstdev(gaps) == pytest.approx(0.25, rel=0.1)


@pytest.mark.parametrize(("n", "rate"), [(-1, 1.0), (3, 0.0), (3, -2.0), (3, float("nan"))])
def test_a_rate_that_is_not_positive_or_a_negative_count_is_refused(n, rate):
    with pytest.raises(ValueError, match="rate > 0"):
        bench.poisson_offsets(n, rate, seed=0)


def out(*, ttft: float, latency: float, tokens: int = 11, success: bool = True) -> bench.RequestOutput:
    return bench.RequestOutput(success=success, ttft=ttft, latency=latency, output_tokens=tokens)


def test_goodput_counts_the_requests_within_both_limits_per_second():
    outputs = [
        out(ttft=0.5, latency=0.5 + 10 * 0.010),    # TTFT 500 ms, TPOT 10 ms: within
        out(ttft=1.5, latency=1.5 + 10 * 0.010),    # TTFT over
        out(ttft=0.2, latency=0.2 + 10 * 0.030),    # TPOT over
        out(ttft=0.2, latency=0.3, success=False),  # failed
        out(ttft=1.0, latency=1.0 + 10 * 0.020),    # both exactly at the limit: within
    ]
    assert bench.goodput(outputs, 2.0, ttft_ms=1000, tpot_ms=20) == pytest.approx(1.0)
    assert bench.goodput(outputs, 2.0, ttft_ms=2000, tpot_ms=40) == pytest.approx(2.0)
    assert bench.goodput(outputs, 0.0, ttft_ms=1000, tpot_ms=20) == 0.0


class _Streamer(http.server.BaseHTTPRequestHandler):
    """Streams three tokens 60 ms apart and notes when each request arrived."""

    arrivals: list[float] = []

    def do_POST(self) -> None:
        _Streamer.arrivals.append(time.perf_counter())
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(3):
            time.sleep(0.06)
            chunk = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == 2 else None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())

    def log_message(self, *args) -> None:
        pass


def test_requests_are_sent_at_their_offsets_whatever_is_in_flight():
    """Offsets 0, 0, 0.15, 0.3 s against a server that takes 180 ms+ per request: the two at 0 go out
    together and the one at 0.15 s while both are in flight (no concurrency cap: a closed loop would
    send the second only at 180 ms)."""
    _Streamer.arrivals = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Streamer)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    offsets = [0.0, 0.0, 0.15, 0.3]
    try:
        async def go():
            async with httpx.AsyncClient(trust_env=False) as c:
                start = time.perf_counter()
                got = await bench.run_specs_at(c, f"http://127.0.0.1:{httpd.server_address[1]}", "m",
                                               [bench.RequestSpec(max_tokens=3, prompt="x")] * 4, offsets=offsets)
                return start, got

        start, (outputs, duration) = asyncio.run(go())
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert all(o.success and o.output_tokens == 3 for o in outputs)
    arrived = sorted(t - start for t in _Streamer.arrivals)
    assert len(arrived) == 4
    for when, at in zip(arrived, offsets):
        assert at <= when < at + 0.1, (arrived, offsets)
    assert duration >= 0.3 + 0.18
    with pytest.raises(ValueError, match="4 specs but 3 offsets"):
        asyncio.run(bench.run_specs_at(None, "http://x", "m", [bench.RequestSpec(max_tokens=1, prompt="x")] * 4,
                                       offsets=[0, 1, 2]))
