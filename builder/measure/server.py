"""What a live endpoint says about itself: served model, context, vLLM version, KV pool."""

from __future__ import annotations

import httpx

from builder.errors import MeasureError
from builder.measure import client as bench
from builder.measure.evidence import ServerInfo
from builder.serve.auth import unauthorized_message


async def probe(client: httpx.AsyncClient, url: str) -> ServerInfo:
    """Read /health, /v1/models, /version and /metrics; fail clearly when the server is not ready."""
    base = url.rstrip("/")
    try:
        health = await client.get(base + "/health", timeout=10)
    except httpx.HTTPError as exc:
        raise MeasureError(
            f"no server answers at {url} ({type(exc).__name__})",
            hint="start it (`builder serve --target ...`) or pass the right --url",
        ) from exc
    if health.status_code != 200:
        raise MeasureError(f"{url}/health answered {health.status_code}: the engine is not ready or dead",
                           hint="check the server log; restart the server")
    answer = await client.get(base + "/v1/models", timeout=10)
    if answer.status_code in (401, 403):  # waiting or retrying cannot fix a key
        message, hint = unauthorized_message(
            answer.status_code, f"{base}/v1/models", sent_key="authorization" in client.headers
        )
        raise MeasureError(message, hint=hint)
    try:
        bench.require_ok(answer, purpose="the model list", hint="check that --url is a vLLM OpenAI server")
        models = answer.json()["data"]
        models[0]["id"]
    except bench.EndpointError as exc:
        raise MeasureError(exc.message, hint=exc.hint) from None
    except (ValueError, KeyError, IndexError, TypeError):
        raise MeasureError(f"{base}/v1/models answered without a model list: {bench.redact(answer.text)[:200]!r}",
                           hint="check that --url is a vLLM OpenAI server") from None
    version = (await client.get(base + "/version", timeout=10)).json().get("version", "unknown")
    samples = await bench.scrape(client, base)
    dtype = next((s.labels.get("cache_dtype") for s in samples if s.name == "vllm:cache_config_info"), None)
    return ServerInfo(
        url=base, served_model=models[0]["id"], max_model_len=int(models[0].get("max_model_len") or 0),
        version=version, kv_cache_dtype=dtype, kv_pool_tokens=bench.kv_pool_tokens(samples),
    )
