"""The API conformance checks behind the `api_surface` gate: the official OpenAI SDK against the
live server, one feature per check, and after every check `/health` must still answer 200.

One request that kills the engine (the logprobs crash this gate was made for) fails its own
check and every check after it: they are recorded as not run, naming the check that broke
the server, instead of piling up connection errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
from pydantic import BaseModel, ConfigDict

from builder.measure._json_prefix import is_json_prefix
from builder.measure import client as bench
from builder.measure.settings import JsonModeRule
from builder.redact import redact

#: A prompt every chat model continues with ordinary words.
PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
TOP_LOGPROBS = 3
#: Per request; the prompt at the context limit is the slowest (a full prefill on CPU).
REQUEST_TIMEOUT_S = 300.0


class CheckResult(BaseModel):
    """One feature: whether the server answered it correctly, and /health right after."""

    model_config = ConfigDict(frozen=True)

    name: str
    ok: bool
    detail: str
    health_after: int | None = None
    seconds: float = 0.0
    exchange: dict[str, Any] = {}


class _Failed(Exception):
    """A check's answer was wrong; the message says how."""


class ApiSurface:
    """The checks, in the order they run; `run()` returns one CheckResult per check."""

    def __init__(self, *, url: str, model: str, max_model_len: int, api_key: str | None, http: httpx.AsyncClient,
                 json_mode: JsonModeRule = "complete") -> None:
        self.url, self.model, self.max_model_len, self.http = url.rstrip("/"), model, max_model_len, http
        self.json_mode_rule = json_mode
        self.json_mode_max_tokens = 128
        # max_retries=0: a retried 500 would hide exactly the failure this gate looks for.
        self.sdk = openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=api_key or "EMPTY", max_retries=0, timeout=REQUEST_TIMEOUT_S
        )
        self.checks: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
            ("chat", self.chat),
            ("completion", self.completion),
            ("chat_stream_usage", self.chat_stream_usage),
            ("completion_stream_usage", self.completion_stream_usage),
            ("chat_logprobs", self.chat_logprobs),
            ("completion_logprobs", self.completion_logprobs),
            ("prompt_logprobs", self.prompt_logprobs),
            ("n_2", self.n_2),
            ("stop", self.stop),
            ("max_tokens_1", self.max_tokens_1),
            ("json_mode", self.json_mode),
            ("prompt_at_context_limit", self.at_context_limit),
            ("prompt_past_context_limit", self.past_context_limit),
            ("malformed_json_body", self.malformed_json_body),
            ("missing_messages", self.missing_messages),
            ("wrong_field_type", self.wrong_field_type),
            ("negative_max_tokens", self.negative_max_tokens),
            ("unknown_model", self.unknown_model),
        ]

    async def run(self, *, on_check: Callable[[str], None] | None = None) -> list[CheckResult]:
        """Every check once, then the SDK's client is closed (left open, its connections were
        closed by the garbage collector after the event loop: 'Event loop is closed', seen on the H200)."""
        try:
            return await self._run(on_check)
        finally:
            await self.sdk.close()

    async def _run(self, on_check: Callable[[str], None] | None) -> list[CheckResult]:
        results: list[CheckResult] = []
        broken_by: str | None = None
        for name, check in self.checks:
            if broken_by is not None:
                results.append(CheckResult(name=name, ok=False, detail=f"not run: the server stopped being healthy after {broken_by}"))
                continue
            if on_check is not None:
                on_check(name)
            start = time.monotonic()
            exchange: dict[str, Any] = {}
            try:
                exchange = await check()
                ok, detail = True, exchange.pop("detail", "ok")
            except _Failed as exc:
                ok, detail = False, str(exc)
            except openai.APIStatusError as exc:
                ok, detail = False, f"HTTP {exc.status_code}: {_body(exc)}"
            except (openai.APIConnectionError, openai.APITimeoutError, httpx.HTTPError) as exc:
                ok, detail = False, f"{type(exc).__name__}: {redact(str(exc))}"
            seconds = time.monotonic() - start
            health = await self._health()
            if health != 200:
                ok, broken_by = False, name
                detail = f"{detail}; then /health answered {health or 'nothing (server gone)'}"
            results.append(CheckResult(name=name, ok=ok, detail=detail, health_after=health, seconds=round(seconds, 3), exchange=exchange))
        return results

    async def _health(self) -> int | None:
        try:
            return (await self.http.get(f"{self.url}/health", timeout=30)).status_code
        except httpx.HTTPError:
            return None

    # --- generation -------------------------------------------------------------------

    async def chat(self) -> dict[str, Any]:
        r = await self.sdk.chat.completions.create(model=self.model, messages=CHAT, max_tokens=16, temperature=0)
        text, where = _generated(r.choices[0].message)
        _expect(text.strip(), "the answer is empty (no content and no reasoning)")
        _expect(r.usage and r.usage.completion_tokens > 0, f"usage is missing or zero: {r.usage}")
        return {"detail": f"{r.usage.completion_tokens} tokens{where}: {text[:60]!r}", "answer": text}

    async def completion(self) -> dict[str, Any]:
        r = await self.sdk.completions.create(model=self.model, prompt=PROMPT, max_tokens=8, temperature=0)
        text = r.choices[0].text
        _expect(text.strip(), "the completion is empty")
        return {"detail": repr(text[:60]), "answer": text}

    async def chat_stream_usage(self) -> dict[str, Any]:
        stream = await self.sdk.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
        parts, usage = [], None
        async for chunk in stream:
            for choice in chunk.choices:
                parts.append(_generated(choice.delta)[0])
            usage = chunk.usage or usage
        return _streamed(parts, usage)

    async def completion_stream_usage(self) -> dict[str, Any]:
        stream = await self.sdk.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=8, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
        parts, usage = [], None
        async for chunk in stream:
            parts.extend(c.text for c in chunk.choices)
            usage = chunk.usage or usage
        return _streamed(parts, usage)

    async def chat_logprobs(self) -> dict[str, Any]:
        r = await self.sdk.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=4, temperature=0, logprobs=True, top_logprobs=TOP_LOGPROBS,
        )
        content = (r.choices[0].logprobs and r.choices[0].logprobs.content) or []
        _expect(len(content) == r.usage.completion_tokens, f"{len(content)} logprob entries for {r.usage.completion_tokens} tokens")
        for entry in content:
            _expect(entry.logprob <= 0, f"logprob {entry.logprob} > 0 for {entry.token!r}")
            _expect(len(entry.top_logprobs) == TOP_LOGPROBS, f"{len(entry.top_logprobs)} top_logprobs, asked {TOP_LOGPROBS}")
        return {"detail": f"{len(content)} tokens x {TOP_LOGPROBS} alternatives", "first": content[0].model_dump() if content else None}

    async def completion_logprobs(self) -> dict[str, Any]:
        r = await self.sdk.completions.create(model=self.model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=TOP_LOGPROBS)
        lp = r.choices[0].logprobs
        _expect(lp is not None and lp.tokens, "no logprobs in the answer")
        n = r.usage.completion_tokens
        _expect(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs or []) == n,
                f"logprob lists of {len(lp.tokens)}/{len(lp.token_logprobs)}/{len(lp.top_logprobs or [])} for {n} tokens")
        for top in lp.top_logprobs:
            # vLLM adds the sampled token when it is not among the top ones.
            _expect(TOP_LOGPROBS <= len(top) <= TOP_LOGPROBS + 1, f"{len(top)} alternatives, asked {TOP_LOGPROBS}")
        return {"detail": f"{n} tokens x {TOP_LOGPROBS} alternatives", "tokens": lp.tokens}

    async def prompt_logprobs(self) -> dict[str, Any]:
        r = await self.sdk.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=1, temperature=0, extra_body={"prompt_logprobs": 1},
        )
        raw = r.model_dump()
        found = raw["choices"][0].get("prompt_logprobs") or raw.get("prompt_logprobs")
        n = r.usage.prompt_tokens
        _expect(isinstance(found, list) and len(found) == n, f"prompt_logprobs has {len(found or [])} entries for {n} prompt tokens")
        _expect(found[0] is None and all(isinstance(x, dict) and x for x in found[1:]),
                "expected None for the first prompt token and a logprob dict for every later one")
        return {"detail": f"{n} prompt tokens", "prompt_logprobs": found}

    async def n_2(self) -> dict[str, Any]:
        r = await self.sdk.chat.completions.create(model=self.model, messages=CHAT, max_tokens=8, temperature=1.0, seed=1, n=2)
        _expect(sorted(c.index for c in r.choices) == [0, 1], f"choices {[c.index for c in r.choices]}, asked n=2")
        return {"detail": "2 choices", "answers": [c.message.content for c in r.choices]}

    async def stop(self) -> dict[str, Any]:
        """Stop at a word the model itself writes at temperature 0, so any model can pass."""
        free = (await self.sdk.completions.create(model=self.model, prompt=PROMPT, max_tokens=24, temperature=0)).choices[0].text
        word = stop_word(free)
        _expect(word is not None, f"the model wrote no word to stop at: {free!r}")
        r = await self.sdk.completions.create(model=self.model, prompt=PROMPT, max_tokens=24, temperature=0, stop=[word])
        c = r.choices[0]
        _expect(c.finish_reason == "stop", f"finish_reason {c.finish_reason!r}, expected 'stop' at {word!r}")
        _expect(word not in c.text and free.startswith(c.text), f"{c.text!r} is not {free!r} cut before {word!r}")
        return {"detail": f"stopped before {word!r}", "free": free, "stopped": c.text}

    async def max_tokens_1(self) -> dict[str, Any]:
        r = await self.sdk.completions.create(model=self.model, prompt=PROMPT, max_tokens=1, temperature=0)
        _expect(r.usage.completion_tokens == 1, f"{r.usage.completion_tokens} tokens for max_tokens=1")
        return {"detail": f"1 token: {r.choices[0].text!r}"}

    async def json_mode(self) -> dict[str, Any]:
        # Thinking off: a reasoning parser holds the JSON grammar back until the reasoning ends, so
        # a thinking answer within max_tokens has no content. Templates without the switch ignore it.
        r = await self.sdk.chat.completions.create(
            model=self.model, max_tokens=self.json_mode_max_tokens, temperature=0, response_format={"type": "json_object"},
            messages=[{"role": "user", "content": 'Describe a cat as a JSON object with the keys "name" and "age".'}],
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        choice = r.choices[0]
        text = choice.message.content or ""
        try:
            value = json.loads(text)
        except ValueError as exc:
            # A model that cannot close the object (random weights) still shows the grammar held.
            if (self.json_mode_rule == "prefix" and choice.finish_reason == "length"
                    and text.lstrip().startswith("{") and is_json_prefix(text)):
                return {"detail": f"cut at max_tokens after {len(text)} characters, the start of a JSON object "
                                  "(the expectation file allows a cut answer)", "answer": text[:200]}
            raise _Failed(f"not JSON ({exc}), finish_reason {choice.finish_reason!r}: {text[:200]!r}") from None
        _expect(isinstance(value, dict), f"a JSON {type(value).__name__}, not an object")
        return {"detail": f"object with keys {sorted(value)[:5]}", "answer": text}

    # --- limits ---------------------------------------------------------------------------

    async def _prompt_ids(self, n: int) -> list[int]:
        r = await self.http.post(f"{self.url}/tokenize", json={"model": self.model, "prompt": "The quick brown fox jumps over the lazy dog. "})
        r.raise_for_status()
        ids = r.json()["tokens"]
        return (ids * (n // len(ids) + 1))[:n]

    async def at_context_limit(self) -> dict[str, Any]:
        n = self.max_model_len - 1  # plus the one generated token: exactly max_model_len
        r = await self.sdk.completions.create(model=self.model, prompt=await self._prompt_ids(n), max_tokens=1, temperature=0)
        _expect(r.usage.prompt_tokens == n, f"the server counted {r.usage.prompt_tokens} prompt tokens, sent {n}")
        return {"detail": f"{n} + 1 tokens = max_model_len {self.max_model_len}"}

    async def past_context_limit(self) -> dict[str, Any]:
        n = self.max_model_len + 16  # well past it: the context-length error, not a max_tokens quirk
        try:
            await self.sdk.completions.create(model=self.model, prompt=await self._prompt_ids(n), max_tokens=1, temperature=0)
        except openai.BadRequestError as exc:
            return {"detail": f"400: {_body(exc)[:120]}"}
        raise _Failed(f"a {n}-token prompt, past max_model_len {self.max_model_len}, was accepted")

    # --- malformed requests ------------------------------------------------------------------

    async def _raw(self, body: bytes | dict[str, Any]) -> dict[str, Any]:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = await self.http.post(
            f"{self.url}/v1/chat/completions", content=content, headers={"content-type": "application/json"}, timeout=60,
        )
        # Error bodies may echo the request's Authorization header: redacted before they are cut.
        text = redact(r.text)
        _expect(400 <= r.status_code < 500, f"HTTP {r.status_code} (a client error, 4xx, was expected): {text[:200]}")
        return {"detail": f"{r.status_code}: {text[:120]}"}

    async def malformed_json_body(self) -> dict[str, Any]:
        return await self._raw(b'{"model": "x", "messages": [')

    async def missing_messages(self) -> dict[str, Any]:
        return await self._raw({"model": self.model, "max_tokens": 4})

    async def wrong_field_type(self) -> dict[str, Any]:
        return await self._raw({"model": self.model, "messages": CHAT, "max_tokens": "many"})

    async def negative_max_tokens(self) -> dict[str, Any]:
        try:
            await self.sdk.chat.completions.create(model=self.model, messages=CHAT, max_tokens=-1)
        except openai.BadRequestError as exc:
            return {"detail": f"400: {_body(exc)[:120]}"}
        raise _Failed("max_tokens=-1 was accepted")

    async def unknown_model(self) -> dict[str, Any]:
        try:
            await self.sdk.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=4)
        except openai.NotFoundError as exc:
            return {"detail": f"404: {_body(exc)[:120]}"}
        raise _Failed("a request for an unknown model was served")


def stop_word(text: str) -> str | None:
    """A word of at least 3 letters that starts after the first character, at its first occurrence."""
    for word in text.split():
        at = text.find(word)
        if len(word) >= 3 and at > 0 and word.isalpha():
            return word
    return None


def _generated(message: BaseModel) -> tuple[str, str]:
    """A chat message's or delta's generated text, reasoning included, and a note when it holds
    reasoning: with a reasoning parser (the release's qwen3) a short answer can be all reasoning,
    with content empty, and that is still an answer."""
    fields = message.model_dump()
    text = bench.message_full_text(fields)
    return text, (" (reasoning)" if text and not fields.get("content") else "")


def _streamed(parts: list[str], usage: Any) -> dict[str, Any]:
    text = "".join(parts)
    _expect(len(parts) > 1, f"{len(parts)} content chunk(s): the answer did not stream")
    _expect(text.strip(), "the streamed answer is empty")
    _expect(usage is not None and usage.completion_tokens > 0, "no usage chunk although include_usage was asked")
    return {"detail": f"{len(parts)} chunks, usage {usage.completion_tokens} tokens", "answer": text}


def _expect(condition: object, message: str) -> None:
    if not condition:
        raise _Failed(message)


def _body(exc: openai.APIStatusError) -> str:
    """The error's body, redacted before it is cut (it may echo the request's Authorization header)."""
    try:
        return redact(json.dumps(exc.body) if exc.body is not None else exc.message)[:300]
    except (TypeError, ValueError):
        return redact(str(exc))[:300]
