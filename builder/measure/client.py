#!/usr/bin/env python3
"""Streaming benchmark for an OpenAI-compatible vLLM server. Needs only httpx.

This module (builder.measure.client) is the single source of the release's client and metric
math: the builder imports it, and every bundle ships its source as benchmark_vllm.py, so it
imports nothing of the builder.

Metric definitions follow `vllm bench serve`, so numbers compare:
  TTFT  start -> first `data:` event that carries `choices` (even with empty text)
  ITL   gaps between successive choice-bearing events
  E2EL  start -> last choice-bearing event
  TPOT  (E2EL - TTFT) / (completion_tokens - 1), completion tokens from `usage`
  output_throughput = total completion tokens / wall duration; request_throughput likewise
Each metric is reported as mean/median/std/p50/p90/p95/p99 under vLLM's JSON keys
(`mean_ttft_ms`, `p99_itl_ms`, ...). Percentiles interpolate linearly, std is the population
std, as numpy's defaults that vLLM uses.

Usage:
  python benchmark_vllm.py --url http://127.0.0.1:8000 --workload all --out results/
  python benchmark_vllm.py --url http://A:8000 --ab-url http://B:8000 --rounds 4 --out ab/
A server started with an API key needs it in VLLM_API_KEY (sent as a Bearer token); the key
is never printed nor written: it, and any `Bearer <token>`, reads <redacted> in output and files.
Exit status: 0 every request succeeded, 1 some requests failed (see the JSON files) or a bug
(with its traceback), 2 bad arguments, 3 the server refused or failed a request the benchmark
cannot go on without (the message names it and what to do).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import re
import secrets
import statistics
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Iterator, Sequence

import httpx

PERCENTILES = (50, 90, 95, 99)
METRICS_MS = ("ttft", "tpot", "itl", "e2el")
REQUEST_TIMEOUT_S = 3600.0
#: The standalone script's exit status when the server refuses a request it needs (EndpointError).
EXIT_ENDPOINT = 3

# ---------------------------------------------------------------------------------------------
# Redaction: the API key never reaches output or a file
#
# The one rule for the whole builder: builder/redact.py re-exports it for every stage. It lives
# here because this file also ships alone in each bundle (benchmark_vllm.py) and may import
# nothing of the builder, so the copy users run applies the same rule.

#: The variable the key is read from, as vLLM reads it.
API_KEY_ENV = "VLLM_API_KEY"
#: What the key, or any bearer credential, reads as in output and files.
REDACTED = "<redacted>"
# A bearer credential in text: the scheme as clients send it ("Bearer", any case after an
# Authorization header). Model text is redacted too, so a bare lowercase "bearer of" stays prose.
# A backslash ends the token, so an escape after it (JSON in a string) stays whole.
_BEARER = re.compile(r"(\bBearer|(?i:authorization[\"']?\s*[:=]\s*[\"']?bearer))\s+[^\s\"'\\,;)]+")


def _spellings(secret: str) -> set[str]:
    """How a value shows up in text: as is, inside a JSON string (escaped or not), inside a repr."""
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}


def redact(text: str, *secrets: str | None) -> str:
    """`text` with the API key in VLLM_API_KEY, each of `secrets`, and every `Bearer <token>`
    replaced by REDACTED. Redact before cutting a text short: a cut key is no longer found."""
    forms = {form for s in (os.environ.get(API_KEY_ENV), *secrets) if s for form in _spellings(s)}
    for form in sorted(forms, key=len, reverse=True):  # a longer spelling first: it may hold a shorter one
        text = text.replace(form, REDACTED)
    return _BEARER.sub(rf"\1 {REDACTED}", text)


def redact_data(value: Any, *secrets: str | None) -> Any:
    """A JSON-like value with every string in it (dict keys included) redacted; redacting the
    data rather than its serialized text finds the key however the serializer escapes it."""
    if isinstance(value, str):
        return redact(value, *secrets)
    if isinstance(value, dict):
        return {redact(k, *secrets) if isinstance(k, str) else k: redact_data(v, *secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v, *secrets) for v in value]
    return value


class RedactingStream:
    """A text stream that redacts what is written through it; everything else is the wrapped stream's."""

    def __init__(self, stream: Any, *secrets: str | None) -> None:
        self._stream, self._secrets = stream, secrets

    def write(self, text: str) -> int:
        self._stream.write(redact(text, *self._secrets))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def redacted_output(*secrets: str | None) -> Iterator[None]:
    """sys.stdout and sys.stderr redacted while the block runs: whatever prints, a traceback too."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(sys.stdout, *secrets), RedactingStream(sys.stderr, *secrets)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


# ---------------------------------------------------------------------------------------------
# Requests the benchmark cannot go on without


class EndpointError(Exception):
    """The server refused or failed a request the benchmark needs (/tokenize, /v1/models,
    /metrics). ``message`` names the endpoint and its answer; ``hint`` says what to do."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(f"{message}\n  fix: {hint}")
        self.message, self.hint = message, hint


class RequestFailed(RuntimeError):
    """A measured request failed; the message names the arm and the server's answer."""


def require_ok(resp: httpx.Response, *, purpose: str, hint: str) -> None:
    """EndpointError unless `resp` is a 2xx; 401/403 get the key's hint, any other its caller's."""
    if resp.is_success:
        return
    url = str(resp.request.url.copy_with(query=None))
    if resp.status_code in (401, 403):
        hint = f"set {API_KEY_ENV} to the key the server was started with (its --api-key)"
    body = " ".join(redact(resp.text).split())[:300]
    raise EndpointError(f"{url} answered HTTP {resp.status_code} to {purpose}: {body or '(empty body)'}", hint=hint)


async def _request(client: httpx.AsyncClient, method: str, url: str, *, purpose: str, hint: str,
                   **kwargs: Any) -> httpx.Response:
    """One request the benchmark needs: an answer other than 2xx, or none, is an EndpointError."""
    try:
        resp = await client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise EndpointError(f"{url} did not answer {purpose} ({type(exc).__name__}: {redact(str(exc))})",
                            hint="check that the server is up at that URL") from None
    require_ok(resp, purpose=purpose, hint=hint)
    return resp

# ---------------------------------------------------------------------------------------------
# Server-sent events


class SSEParser:
    """Incremental SSE decoder: feed text chunks, get the `data:` payload of each whole event.

    Events end at a blank line; `:` comment lines and the `[DONE]` sentinel are dropped.
    """

    def __init__(self) -> None:
        self._buf = ""

    def feed(self, chunk: str) -> list[str]:
        self._buf += chunk.replace("\r\n", "\n")
        payloads = []
        while "\n\n" in self._buf:
            event, self._buf = self._buf.split("\n\n", 1)
            payload = _event_data(event)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def close(self) -> list[str]:
        """Flush a final event that was not followed by a blank line."""
        rest, self._buf = self._buf, ""
        payload = _event_data(rest)
        return [] if payload is None else [payload]


def _event_data(event: str) -> str | None:
    data = [
        line[5:].removeprefix(" ")
        for line in event.split("\n")
        if line.startswith("data:")
    ]
    if not data:
        return None
    payload = "\n".join(data)
    return None if payload.strip() == "[DONE]" else payload


# ---------------------------------------------------------------------------------------------
# One request


@dataclass
class RequestSpec:
    """What to send. `prompt` goes to /v1/completions; `messages` to /v1/chat/completions."""

    max_tokens: int
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    temperature: float = 0.0
    ignore_eos: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.messages is not None else "/v1/completions"

    def payload(self, model: str, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
            "stream": stream,
        }
        if self.messages is not None:
            body["messages"] = self.messages
        else:
            body["prompt"] = self.prompt
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra)
        return body


@dataclass
class RequestOutput:
    """Timings of one streamed request, in seconds since its own start."""

    success: bool = False
    error: str = ""
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int = 0
    text: str = ""
    finish_reason: str | None = None
    events: int = 0

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first, (E2EL - TTFT) / (completion_tokens - 1), as
        `vllm bench serve` computes it; None with fewer than two tokens."""
        return (self.latency - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else None

    @property
    def decode_tok_s(self) -> float | None:
        """Per-request decode speed: (completion_tokens - 1) / (E2EL - TTFT)."""
        span = self.latency - self.ttft
        if not self.success or self.output_tokens < 2 or span <= 0:
            return None
        return (self.output_tokens - 1) / span


def _choice_text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    return message_full_text(choice.get("delta") or {})


def message_full_text(message: dict[str, Any]) -> str:
    """A chat message's or stream delta's generated text: reasoning (`reasoning` since vLLM 0.33,
    `reasoning_content` before), then content."""
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    return reasoning + (message.get("content") or "")


def output_from_events(start: float, timed_payloads: Iterable[tuple[float, str]]) -> RequestOutput:
    """Apply vLLM's timing rules to (perf_counter timestamp, SSE data payload) pairs."""
    out = RequestOutput()
    last = start
    for stamp, payload in timed_payloads:
        data = json.loads(payload)
        if data.get("error") or data.get("object") == "error":
            out.error = redact(json.dumps(data.get("error", data)))[:500]
            return out
        choices = data.get("choices")
        if choices:
            if out.events == 0:
                out.ttft = stamp - start
            else:
                out.itl.append(stamp - last)
            last = stamp
            out.events += 1
            out.text += _choice_text(choices[0])
            out.finish_reason = choices[0].get("finish_reason") or out.finish_reason
        usage = data.get("usage")
        if usage:
            out.output_tokens = int(usage.get("completion_tokens") or 0)
            out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    if out.events == 0:
        out.error = out.error or "stream ended without any choices event"
        return out
    out.success = True
    out.latency = last - start
    if not out.output_tokens:
        # No usage block (server too old): vLLM falls back to re-tokenizing; we count events.
        out.output_tokens = out.events
    return out


async def stream_request(
    client: httpx.AsyncClient, base_url: str, model: str, spec: RequestSpec
) -> RequestOutput:
    """Send one streaming request and time it with perf_counter, as `vllm bench serve` does."""
    parser = SSEParser()
    timed: list[tuple[float, str]] = []
    start = time.perf_counter()
    try:
        async with client.stream(
            "POST", base_url.rstrip("/") + spec.path, json=spec.payload(model, stream=True),
            timeout=REQUEST_TIMEOUT_S,
        ) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")
                return RequestOutput(error=f"HTTP {resp.status_code}: {redact(body)[:500]}")
            async for chunk in resp.aiter_text():
                for payload in parser.feed(chunk):
                    timed.append((time.perf_counter(), payload))
            timed.extend((time.perf_counter(), p) for p in parser.close())
    except httpx.HTTPError as exc:
        return RequestOutput(error=f"{type(exc).__name__}: {redact(str(exc))}")
    return output_from_events(start, timed)


async def post_json(
    client: httpx.AsyncClient, base_url: str, model: str, spec: RequestSpec
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Non-streaming request; returns (request body, response body) for evidence files."""
    body = spec.payload(model, stream=False)
    resp = await client.post(base_url.rstrip("/") + spec.path, json=body, timeout=REQUEST_TIMEOUT_S)
    try:
        answer = resp.json()
    except ValueError:
        answer = {"error": redact(resp.text)[:2000]}
    if resp.status_code != 200:
        answer = {"http_status": resp.status_code, **answer}
    return body, answer


def response_text(answer: dict[str, Any]) -> str:
    """The first choice's text of a non-streamed completion or chat completion."""
    choices = answer.get("choices") or [{}]
    choice = choices[0]
    if "message" in choice:
        return (choice["message"] or {}).get("content") or ""
    return choice.get("text") or ""


def response_full_text(answer: dict[str, Any]) -> str:
    """Everything the model generated in the first choice: reasoning, then content. With a
    reasoning parser, content alone can be empty (all tokens spent thinking), and two empty
    answers would compare equal however different the generations were."""
    choices = answer.get("choices") or [{}]
    choice = choices[0]
    if "message" in choice:
        return message_full_text(choice["message"] or {})
    return choice.get("text") or ""


# ---------------------------------------------------------------------------------------------
# Statistics


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def describe(values: Sequence[float], name: str, *, scale: float = 1.0, unit: str = "_ms") -> dict[str, float]:
    """mean/median/std/pNN keys for one metric, zero when empty (as vLLM reports)."""
    vals = [v * scale for v in values]
    out = {
        f"mean_{name}{unit}": statistics.fmean(vals) if vals else 0.0,
        f"median_{name}{unit}": statistics.median(vals) if vals else 0.0,
        f"std_{name}{unit}": statistics.pstdev(vals) if vals else 0.0,
    }
    for q in PERCENTILES:
        out[f"p{q}_{name}{unit}"] = percentile(vals, q)
    return out


def summarize(outputs: Sequence[RequestOutput], duration_s: float) -> dict[str, Any]:
    """vLLM-style result dict for one run of requests that took `duration_s` wall seconds."""
    ok = [o for o in outputs if o.success]
    tpots = [t for o in ok if (t := o.tpot) is not None]
    total_in = sum(o.prompt_tokens for o in ok)
    total_out = sum(o.output_tokens for o in ok)
    dur = duration_s if duration_s > 0 else float("nan")
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(outputs) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
    }
    result.update(describe([o.ttft for o in ok], "ttft", scale=1000))
    result.update(describe(tpots, "tpot", scale=1000))
    result.update(describe([g for o in ok for g in o.itl], "itl", scale=1000))
    result.update(describe([o.latency for o in ok], "e2el", scale=1000))
    result.update(describe([d for o in ok if (d := o.decode_tok_s)], "decode", unit="_tok_s"))
    result["errors"] = sorted({o.error for o in outputs if not o.success})[:5]
    return result


# ---------------------------------------------------------------------------------------------
# Prompts of a given token length (calibrated with the server's own /tokenize)

_VOCAB = (
    "river stone market lantern harbor meadow copper violin orbit garden signal canyon "
    "ribbon thunder pepper island marble rocket winter candle forest mirror engine velvet "
    "desert planet silver kettle window bridge anchor glacier puzzle shadow compass falcon "
    "harvest saddle tunnel beacon quartz ladder cobalt orchard summit pillow timber whistle"
).split()


async def count_tokens(
    client: httpx.AsyncClient, base_url: str, model: str, text: str | None = None,
    *, messages: list[dict[str, str]] | None = None,
) -> int:
    """Token count of a raw prompt, or of chat messages with the chat template applied."""
    body: dict[str, Any] = {"model": model}
    if messages is not None:
        body.update(messages=messages, add_generation_prompt=True)
    else:
        body.update(prompt=text, add_special_tokens=True)
    url = base_url.rstrip("/") + "/tokenize"
    resp = await _request(client, "POST", url, json=body, timeout=120, purpose="a token count", hint=_TOKENIZE_HINT)
    try:
        return int(resp.json()["count"])
    except (ValueError, KeyError, TypeError):
        raise EndpointError(f"{url} answered {resp.status_code} without a token count: {redact(resp.text)[:200]!r}",
                            hint="point --url at a vLLM OpenAI server: its /tokenize answers {\"count\": N, ...}") from None


_TOKENIZE_HINT = ("prompts are sized with the server's own /tokenize: read the server log for why it refused; "
                  "a model served without its tokenizer (--skip-tokenizer-init) or chat template cannot be counted")


async def largest_fitting(count: Callable[[int], Awaitable[int]], limit: int, n_items: int) -> int:
    """The largest k in [0, n_items] with count(k) <= limit, for a count that grows with k.

    Bisection's answer in far fewer calls: each probe interpolates between the bracket's
    known counts (tokens grow nearly in proportion to words; the Illinois rule halves a stale
    end's weight so the bracket closes from both sides), and wherever two probes have not
    halved the bracket the next one bisects, so no count takes more than 3 x log2(n_items)
    calls. At 128K tokens a count is a ~1 MB /tokenize round trip: bisection's ~18 per prompt
    were most of a long-prompt benchmark cell; on word-like counts this takes at most 8
    (tests/measure/test_prompt_fit.py)."""
    # f(k) = count(k) - limit - 0.5: negative where k fits, and never 0.
    lo, f_lo = 0, -limit - 0.5  # count(0) is taken as fitting: k = 0 is the last resort
    hi, f_hi = n_items, await count(n_items) - limit - 0.5
    if f_hi < 0:
        return n_items
    widths, kept = [hi - lo], 0  # kept: which end the last probe left in place (-1 lo, 1 hi)
    while hi - lo > 1:
        if len(widths) > 2 and 2 * (hi - lo) > widths[-3]:
            k = (lo + hi) // 2
        else:
            k = lo + int((hi - lo) * -f_lo / (f_hi - f_lo))
        k = min(max(k, lo + 1), hi - 1)
        f = await count(k) - limit - 0.5
        if f < 0:
            lo, f_lo = k, f
            f_hi = f_hi / 2 if kept == 1 else f_hi
            kept = 1
        else:
            hi, f_hi = k, f
            f_lo = f_lo / 2 if kept == -1 else f_lo
            kept = -1
        widths.append(hi - lo)
    return lo


async def make_prompt(
    client: httpx.AsyncClient, base_url: str, model: str, n_tokens: int, *, tag: str
) -> str:
    """Random words seeded by `tag`, trimmed until /tokenize says <= n_tokens. The prompt starts
    with the tag, so prompts with different tags never share a cached prefix."""
    rng = random.Random(tag)
    head = f"[{tag}] "
    words = [rng.choice(_VOCAB) for _ in range(int(n_tokens * 1.2) + 8)]

    # Tokenizer merges make the count non-additive, so each candidate is counted by the server.
    def count(k: int) -> Awaitable[int]:
        return count_tokens(client, base_url, model, head + " ".join(words[:k]))

    return head + " ".join(words[: await largest_fitting(count, n_tokens, len(words))])


# ---------------------------------------------------------------------------------------------
# Workloads


@dataclass
class Workload:
    """`num_prompts` requests of `input_len` prompt tokens and exactly `output_len` output
    tokens (ignore_eos), at most `concurrency` in flight."""

    name: str
    kind: str
    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int


def standard_suite(
    max_model_len: int,
    *,
    prefill_lens: Sequence[int] | None = None,
    decode_output_len: int = 512,
    concurrency_levels: Sequence[int] = (1, 2, 4, 8),
    repeats: int = 3,
) -> list[Workload]:
    """The release's four workloads. Prefill lengths default to powers of two up to the
    context, plus one just under it (the context minus room for the outputs)."""
    ceiling = max_model_len - 64
    if prefill_lens is None:
        lens, n = [], 1024
        while n < ceiling:
            lens.append(n)
            n *= 2
        prefill_lens = [*lens, ceiling]
    bad = [n for n in prefill_lens if n <= 0 or n > ceiling]
    if bad:
        raise ValueError(f"prefill lengths {bad} do not fit max_model_len={max_model_len} (limit {ceiling})")
    suite = [Workload(f"prefill-{n}", "prefill", n, 16, repeats, 1) for n in prefill_lens]
    suite.append(Workload("decode", "decode", 128, decode_output_len, repeats, 1))
    suite.append(Workload("concurrent2", "concurrent2", 1024, 256, 2, 2))
    suite += [
        Workload(f"concurrency-{c}", "concurrency", 512, 128, max(2 * c, repeats), c)
        for c in concurrency_levels
    ]
    return suite


async def run_specs(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    specs: Sequence[RequestSpec],
    *,
    concurrency: int,
    on_done: Callable[[], None] | None = None,
) -> tuple[list[RequestOutput], float]:
    """Send all specs at once, at most `concurrency` in flight; returns outputs and wall time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(spec: RequestSpec) -> RequestOutput:
        async with gate:
            out = await stream_request(client, base_url, model, spec)
        if on_done:
            on_done()
        return out

    start = time.perf_counter()
    outputs = await asyncio.gather(*(one(s) for s in specs))
    return list(outputs), time.perf_counter() - start


def poisson_offsets(n: int, rate: float, *, seed: int) -> list[float]:
    """When each of `n` requests is sent, in seconds from the first: a seeded Poisson arrival process of
    `rate` requests per second (as `vllm bench serve --request-rate R --seed S` sends them)."""
    if n < 0 or not rate > 0:
        raise ValueError(f"poisson_offsets needs n >= 0 and rate > 0, got n={n}, rate={rate}")
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


async def run_specs_at(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    specs: Sequence[RequestSpec],
    *,
    offsets: Sequence[float],
) -> tuple[list[RequestOutput], float]:
    """Send spec i at offsets[i] seconds after the start, whatever is in flight (an open-loop load, so a
    slow server queues requests rather than slowing their arrival); returns outputs and wall time."""
    if len(offsets) != len(specs):
        raise ValueError(f"{len(specs)} specs but {len(offsets)} offsets")
    start = time.perf_counter()

    async def one(spec: RequestSpec, at: float) -> RequestOutput:
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        return await stream_request(client, base_url, model, spec)

    outputs = await asyncio.gather(*(one(s, at) for s, at in zip(specs, offsets)))
    return list(outputs), time.perf_counter() - start


def goodput(outputs: Sequence[RequestOutput], duration_s: float, *, ttft_ms: float, tpot_ms: float) -> float:
    """Requests per second that succeeded within both limits (`vllm bench serve --goodput ttft:X tpot:Y`):
    TTFT at most ttft_ms, and time per output token after the first at most tpot_ms."""
    def within(o: RequestOutput) -> bool:
        return o.success and o.ttft * 1000 <= ttft_ms and (o.tpot or 0.0) * 1000 <= tpot_ms

    return sum(1 for o in outputs if within(o)) / duration_s if duration_s > 0 else 0.0


async def workload_prompts(
    client: httpx.AsyncClient, base_url: str, model: str, wl: Workload, *, nonce: str
) -> list[str]:
    """The num_prompts + 1 prompts run_workload sends for `wl` (the last, cut short, warms up)."""
    return [
        await make_prompt(client, base_url, model, wl.input_len, tag=f"{nonce}-{wl.name}-{i}")
        for i in range(wl.num_prompts + 1)
    ]


async def run_workload(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    wl: Workload,
    *,
    nonce: str | None = None,
    on_done: Callable[[], None] | None = None,
    prompts: Sequence[str] | None = None,
    output_digests: bool = False,
) -> dict[str, Any]:
    """Run one workload (with one untimed warm-up request) and return its vLLM-style result.

    Prompts are tagged with a fresh nonce per run, so neither an earlier workload nor an
    earlier run on the same server turns prefill into a prefix-cache hit. `prompts` (from
    workload_prompts with the same nonce) sends the same prompts to several servers, so arms
    compared side by side prefill the same tokens, and fitting them is paid once. `output_digests` adds
    each request's output text as a sha256 prefix, in prompt order: servers that should compute alike
    are shown to answer alike without the texts travelling."""
    nonce = nonce or secrets.token_hex(4)
    if prompts is None:
        prompts = await workload_prompts(client, base_url, model, wl, nonce=nonce)
    elif len(prompts) != wl.num_prompts + 1:
        raise ValueError(
            f"prompts: {len(prompts)} given, but workload {wl.name} sends num_prompts + 1 = "
            f"{wl.num_prompts + 1} (the last warms up); build them with workload_prompts"
        )
    specs = [RequestSpec(max_tokens=wl.output_len, prompt=p) for p in prompts]
    await stream_request(client, base_url, model, RequestSpec(max_tokens=4, prompt=prompts[-1][:200]))
    outputs, duration = await run_specs(
        client, base_url, model, specs[:-1], concurrency=wl.concurrency, on_done=on_done
    )
    result = {
        **asdict(wl), "workload": wl.name, "model_id": model, "base_url": base_url, "prompt_nonce": nonce,
        **summarize(outputs, duration),
    }
    if wl.kind == "concurrent2":
        result["wall_time_s"] = duration
    if output_digests:
        result["output_sha256"] = [hashlib.sha256(o.text.encode()).hexdigest()[:16] for o in outputs]
    return result


# ---------------------------------------------------------------------------------------------
# /metrics (Prometheus text)

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """Parse Prometheus exposition text. Raises ValueError naming the bad line."""
    samples = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"/metrics line {lineno} is not a sample: {raw[:120]!r}")
        labels: dict[str, str] = {}
        rest = m.group("labels") or ""
        pos = 0
        while pos < len(rest):
            lm = _LABEL.match(rest, pos)
            if not lm:
                raise ValueError(f"/metrics line {lineno} has malformed labels: {raw[:120]!r}")
            labels[lm.group(1)] = (
                lm.group(2).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
            )
            pos = lm.end()
        samples.append(Sample(m.group("name"), labels, float(m.group("value"))))
    return samples


def metric_sum(samples: Iterable[Sample], name: str) -> float | None:
    """Sum of a counter/gauge over all label sets (a counter is also found under `<name>_total`)."""
    names = {name, name + "_total"} if not name.endswith("_total") else {name, name[:-6]}
    values = [s.value for s in samples if s.name in names]
    return sum(values) if values else None


def kv_pool_tokens(samples: Iterable[Sample]) -> int | None:
    """KV pool size in tokens from vllm:cache_config_info: its kv_cache_size_tokens label where
    the engine exports one, else num_gpu_blocks x block_size."""
    def num(v: str | None) -> int | None:
        return None if v in (None, "", "None") else int(v)

    for s in samples:
        if s.name == "vllm:cache_config_info":
            direct = num(s.labels.get("kv_cache_size_tokens"))
            blocks, size = num(s.labels.get("num_gpu_blocks")), num(s.labels.get("block_size"))
            if direct is not None:
                return direct
            if blocks is not None and size is not None:
                return blocks * size
    return None


_LOG_KV = re.compile(r"(?:GPU|CPU)? ?KV cache size:\s*([\d,]+)\s*tokens")


def kv_pool_tokens_from_log(log: str) -> int | None:
    """The last `KV cache size: N tokens` line of a vLLM startup log."""
    found = _LOG_KV.findall(log)
    return int(found[-1].replace(",", "")) if found else None


async def scrape(client: httpx.AsyncClient, base_url: str) -> list[Sample]:
    resp = await _request(client, "GET", base_url.rstrip("/") + "/metrics", timeout=30, purpose="a metrics scrape",
                          hint="serve with vLLM's OpenAI server, which exports Prometheus metrics at /metrics")
    return parse_metrics(resp.text)


def acceptance_rate(before: Sequence[Sample], after: Sequence[Sample]) -> float | None:
    """MTP/spec-decode acceptance = accepted draft tokens / proposed draft tokens, over an interval."""
    acc = [metric_sum(x, "vllm:spec_decode_num_accepted_tokens") for x in (before, after)]
    drafted = [metric_sum(x, "vllm:spec_decode_num_draft_tokens") for x in (before, after)]
    if None in acc or None in drafted or drafted[1] - drafted[0] <= 0:
        return None
    return (acc[1] - acc[0]) / (drafted[1] - drafted[0])


# ---------------------------------------------------------------------------------------------
# A/B: two endpoints, interleaved arms, matched background load

AB_METRICS = ("ttft_ms", "decode_tok_s", "mtp_acceptance", "kv_pool_tokens")


@dataclass
class Arm:
    label: str
    base_url: str
    model: str


async def _background(client: httpx.AsyncClient, arm: Arm, stop: asyncio.Event, streams: int) -> None:
    """Keep `streams` decode requests in flight on `arm` until `stop` is set."""
    async def loop(i: int) -> None:
        spec = RequestSpec(max_tokens=64, prompt=f"[bg {i}] " + " ".join(_VOCAB))
        while not stop.is_set():
            out = await stream_request(client, arm.base_url, arm.model, spec)
            if not out.success:
                await asyncio.sleep(1)  # do not hammer a failing server; the measured request reports it

    await asyncio.gather(*(loop(i) for i in range(streams)))


async def measure_arm(
    client: httpx.AsyncClient, arm: Arm, *, input_len: int, output_len: int, tag: str,
    background_streams: int,
) -> dict[str, Any]:
    """One A/B sample: one measured request on `arm` under the given background load."""
    prompt = await make_prompt(client, arm.base_url, arm.model, input_len, tag=tag)
    before = await scrape(client, arm.base_url)
    stop = asyncio.Event()
    bg = asyncio.create_task(_background(client, arm, stop, background_streams))
    try:
        out = await stream_request(client, arm.base_url, arm.model, RequestSpec(max_tokens=output_len, prompt=prompt))
    finally:
        stop.set()
        await bg
    after = await scrape(client, arm.base_url)
    if not out.success:
        raise RequestFailed(f"arm {arm.label}: request failed: {out.error}")
    return {
        "ttft_ms": out.ttft * 1000,
        "decode_tok_s": out.decode_tok_s,
        "mtp_acceptance": acceptance_rate(before, after),
        "kv_pool_tokens": kv_pool_tokens(after),
        "prompt_tokens": out.prompt_tokens,
        "output_tokens": out.output_tokens,
    }


def ab_deltas(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per metric: A and B means, and the per-pair delta % of B against A with its spread."""
    table: dict[str, dict[str, Any]] = {}
    for key in AB_METRICS:
        both = [(a[key], b[key]) for a, b in pairs if a.get(key) is not None and b.get(key) is not None]
        deltas = [(b - a) / a * 100 for a, b in both if a]
        table[key] = {
            "a_mean": statistics.fmean(a for a, _ in both) if both else None,
            "b_mean": statistics.fmean(b for _, b in both) if both else None,
            "delta_pct_mean": statistics.fmean(deltas) if deltas else None,
            "delta_pct_spread": statistics.stdev(deltas) if len(deltas) > 1 else (0.0 if deltas else None),
            "delta_pct_min": min(deltas) if deltas else None,
            "delta_pct_max": max(deltas) if deltas else None,
            "pairs": len(both),
        }
    return table


async def run_ab(
    client: httpx.AsyncClient, a: Arm, b: Arm, *, rounds: int, input_len: int, output_len: int,
    background_streams: int = 1, on_done: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Interleave the arms (ABBA order, so neither arm always goes first) with the same prompt
    length and background load, and report per-pair deltas."""
    pairs = []
    nonce = secrets.token_hex(4)
    for r in range(rounds):
        order = (a, b) if r % 2 == 0 else (b, a)
        got: dict[str, dict[str, Any]] = {}
        for arm in order:
            # Same tag for both arms of a round: identical prompts, distinct across rounds.
            got[arm.label] = await measure_arm(
                client, arm, input_len=input_len, output_len=output_len, tag=f"{nonce}-ab-{r}",
                background_streams=background_streams,
            )
            if on_done:
                on_done()
        pairs.append((got[a.label], got[b.label]))
    return {
        "a": asdict(a), "b": asdict(b), "rounds": rounds, "input_len": input_len,
        "output_len": output_len, "background_streams": background_streams,
        "pairs": [{"a": x, "b": y} for x, y in pairs], "deltas": ab_deltas(pairs),
    }


def format_ab_table(ab: dict[str, Any]) -> str:
    """The seed-style markdown delta table."""
    def fmt(v: Any, pct: bool = False) -> str:
        if v is None:
            return "n/a"
        return f"{v:+.1f}%" if pct else f"{v:,.1f}"

    rows = [
        f"| metric | {ab['a']['label']} | {ab['b']['label']} | delta | spread (sd) | pairs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, d in ab["deltas"].items():
        spread = "n/a" if d["delta_pct_spread"] is None else f"±{d['delta_pct_spread']:.1f}%"
        rows.append(
            f"| {key} | {fmt(d['a_mean'])} | {fmt(d['b_mean'])} | {fmt(d['delta_pct_mean'], True)} "
            f"| {spread} | {d['pairs']} |"
        )
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------
# Standalone command line


async def _served_model(client: httpx.AsyncClient, base_url: str) -> tuple[str, int]:
    url = base_url.rstrip("/") + "/v1/models"
    resp = await _request(client, "GET", url, timeout=30, purpose="the model list",
                          hint="point --url at the vLLM server itself (check the host and port)")
    try:
        card = resp.json()["data"][0]
        return card["id"], int(card.get("max_model_len") or 0)
    except (ValueError, KeyError, IndexError, TypeError):
        raise EndpointError(f"{url} answered without a model list: {redact(resp.text)[:200]!r}",
                            hint="point --url at the vLLM server itself (check the host and port)") from None


async def _main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The key comes from the environment as vLLM reads it, so it never shows in `ps`.
    key = os.environ.get("VLLM_API_KEY")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"} if key else None) as client:
        model, max_len = await _served_model(client, args.url)
        if args.ab_url:
            model_b, _ = await _served_model(client, args.ab_url)
            ab = await run_ab(
                client, Arm("A", args.url, model), Arm("B", args.ab_url, model_b),
                rounds=args.rounds, input_len=args.ab_input_len, output_len=args.ab_output_len,
                background_streams=args.background,
            )
            (out / "ab.json").write_text(json.dumps(redact_data(ab), indent=2))
            print(format_ab_table(ab))
            return 0
        suite = standard_suite(
            max_len, decode_output_len=args.decode_output_len, prefill_lens=_ints(args.prefill_lens),
            concurrency_levels=_ints(args.concurrency) or (1, 2, 4, 8),
        )
        if args.workload != "all":
            suite = [w for w in suite if w.kind == args.workload]
        failed = 0
        for wl in suite:
            res = await run_workload(client, args.url, model, wl)
            (out / f"bench-{wl.name}.json").write_text(json.dumps(redact_data(res), indent=2))
            failed += res["failed"]
            print(f"{wl.name:>16}: ttft {res['mean_ttft_ms']:9.1f} ms  tpot {res['mean_tpot_ms']:7.2f} ms  "
                  f"out {res['output_throughput']:8.1f} tok/s  ok {res['completed']}/{wl.num_prompts}")
    return 1 if failed else 0


def _ints(text: str | None) -> list[int] | None:
    return [int(x) for x in text.split(",")] if text else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--workload", default="all", choices=["all", "prefill", "decode", "concurrent2", "concurrency"])
    p.add_argument("--prefill-lens", help="comma-separated prompt lengths (default: powers of two up to the context)")
    p.add_argument("--concurrency", help="comma-separated levels of the concurrency sweep (default 1,2,4,8)")
    p.add_argument("--decode-output-len", type=int, default=512)
    p.add_argument("--out", default="bench-results")
    p.add_argument("--ab-url", help="second endpoint: run an interleaved A/B instead")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--ab-input-len", type=int, default=2048)
    p.add_argument("--ab-output-len", type=int, default=128)
    p.add_argument("--background", type=int, default=1, help="background decode streams per arm")
    args = p.parse_args(argv)
    with redacted_output():
        try:
            return asyncio.run(_main(args))
        except (EndpointError, RequestFailed) as exc:  # the server's fault, not a bug: no traceback
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ENDPOINT
        except Exception:  # a bug keeps its traceback, printed here so it is redacted too
            traceback.print_exc()
            return 1


if __name__ == "__main__":
    sys.exit(main())
