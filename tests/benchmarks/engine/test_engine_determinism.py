"""The determinism probe: one request at a time, the gate's request shape, a salt per request
only in the salted pass, and distinct outputs counted on the whole generation."""

from __future__ import annotations

import asyncio

from benchmarks.engine import determinism


def run(make, text):
    srv = make(lambda body: {"choices": [{"message": {"content": text(body)}}]})
    return srv, asyncio.run(determinism.probe(srv.url, "m", "Write a story.", runs=4, max_tokens=64))


def test_requests_go_one_at_a_time_in_the_gates_shape_salted_only_in_the_salted_pass(recording_server):
    srv, out = run(recording_server, lambda body: "same")
    bodies = [r["body"] for r in srv.requests]
    assert srv.overlapping() == 0 and len(bodies) == 8
    assert all(b["temperature"] == 0.0 and b["seed"] == 0 and b["max_tokens"] == 64 and not b["ignore_eos"]
               and b["messages"] == [{"role": "user", "content": "Write a story."}] for b in bodies)
    serial, salted = bodies[:4], bodies[4:]
    assert all("cache_salt" not in b for b in serial)
    assert len({b["cache_salt"] for b in salted}) == 4
    assert out == {m: {"unique": 1, "runs": 4, "first_differs_at": None} for m in determinism.MODES}


def test_a_cache_hit_that_decodes_differently_shows_in_serial_only(recording_server):
    """The first serial request prefills; the later ones would hit the cache: a server whose cache
    hits part from fresh prefills gives 2 distinct serial outputs and 1 salted."""
    seen = []

    def text(body):
        cached = "cache_salt" not in body and seen.count(None) > 0
        seen.append(body.get("cache_salt"))
        return "story-cached" if cached else "story-fresh"

    _, out = run(recording_server, text)
    assert out["serial"]["unique"] == 2 and out["serial"]["first_differs_at"] == len("story-")
    assert out["serial_salted"]["unique"] == 1


def test_the_overlap_count_sees_requests_sent_together(recording_server):
    """Control for the one-at-a-time check: the same server counts concurrent requests. Each request
    waits for the other two at a barrier (not a sleep a loaded machine could outlast), so all three
    are in flight together whenever the client sends them together."""
    import threading

    import httpx

    barrier = threading.Barrier(3, timeout=30)
    srv = recording_server(lambda body: {}, delay=lambda body: barrier.wait() * 0)

    async def together():
        async with httpx.AsyncClient(trust_env=False) as client:
            await asyncio.gather(*(client.post(srv.url, json={"i": i}) for i in range(3)))

    asyncio.run(together())
    assert srv.overlapping() == 2
