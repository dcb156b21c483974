"""Why identical greedy requests part: the determinism gate's prompt, sent again one at a time.

The gate sends its N requests together (H200, eager: 2 distinct outputs of 8 on every KV dtype). Two
serial passes split the causes apart:
  serial         one after another, the prompt shared: request 1 prefills, the rest hit the cache;
  serial_salted  one after another, each with its own `cache_salt`: every request prefills alone.
serial_salted > 1 distinct: the engine is not deterministic even alone (kernel nondeterminism);
serial_salted == 1 < serial: a cache hit decodes differently from a fresh prefill;
both 1: batch composition is what parts the gate's outputs.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from builder.measure import client as bench

MODES = ("serial", "serial_salted")


async def probe(url: str, model: str, prompt: str, *, runs: int, max_tokens: int) -> dict[str, Any]:
    """Each mode's distinct outputs, in the gate's request shape (temperature 0, seed 0)."""
    salt_run = uuid.uuid4().hex[:12]
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(trust_env=False) as client:
        for mode in MODES:
            texts = []
            for i in range(runs):
                extra: dict[str, Any] = {"seed": 0}
                if mode == "serial_salted":
                    extra["cache_salt"] = f"qfn-determinism-{salt_run}-{i}"
                spec = bench.RequestSpec(max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}],
                                         temperature=0.0, ignore_eos=False, extra=extra)
                _, answer = await bench.post_json(client, url, model, spec)
                if "http_status" in answer:
                    raise RuntimeError(f"{mode} run {i}: HTTP {answer['http_status']}: {str(answer)[:300]}")
                texts.append(bench.response_full_text(answer))
            out[mode] = {"unique": len(set(texts)), "runs": runs, "first_differs_at": _first_difference(texts)}
    return out


def _first_difference(texts: list[str]) -> int | None:
    """Characters all outputs share before the first one parts (None: all identical)."""
    if len(set(texts)) <= 1:
        return None
    n = 0
    while all(len(t) > n for t in texts) and len({t[n] for t in texts}) == 1:
        n += 1
    return n
