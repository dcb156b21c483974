"""The api_surface checks' own bookkeeping, against a port nobody listens on (the checks against
real servers are in tests/serve/test_cpu_smoke_e2e.py)."""

from __future__ import annotations

import asyncio

import httpx

from builder.measure.api_surface import ApiSurface


def test_a_dead_server_fails_the_first_check_skips_the_rest_and_closes_the_sdk_client(free_port):
    async def run():
        async with httpx.AsyncClient() as http:
            surface = ApiSurface(url=f"http://127.0.0.1:{free_port}", model="m", max_model_len=64, api_key=None, http=http)
            return surface, await surface.run()

    surface, results = asyncio.run(run())
    assert [r.name for r in results] == [name for name, _ in surface.checks]
    assert not results[0].ok and "server gone" in results[0].detail
    assert all(r.detail == "not run: the server stopped being healthy after chat" for r in results[1:])
    # Left open, the SDK's connections were closed after the event loop ended ("Event loop is closed").
    assert surface.sdk.is_closed()
