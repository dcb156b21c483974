"""Fidelity of a quantized KV cache in the engine: greedy-token agreement and next-token KL
against the bf16 KV server, over prompts longer than the QSA top-k budget.

With random weights the next-token distribution is nearly flat (entropy ~10.75 nats of
ln(49280) = 10.81), so a top-20 list holds ~0.1% of the mass and says nothing about KL. The
server instead returns log-probabilities of a fixed random sample S of m token ids
(`logprob_token_ids`, m <= 128) at the first generated position, and KL(P||Q) is estimated
without bias from the identity KL = sum_v p_v (log(p_v/q_v) + q_v/p_v - 1):

    KL_hat = (V / m) * sum_{v in S} p_v * (log(p_v / q_v) + q_v / p_v - 1)

Every term is >= 0 and second order in the difference, so a flat P gives a low-variance
estimate; `standard_error` reports its sampling spread. P is the bf16 KV server, Q the
server under test; the same prompt token ids and the same S go to both.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx

#: vLLM 0.33.0's MAX_LOGPROB_TOKEN_IDS.
MAX_SAMPLE_IDS = 128
TOKEN_ID_PREFIX = "token_id:"


def sample_ids(*, vocab_size: int, m: int, seed: int) -> list[int]:
    """m distinct token ids drawn uniformly from [0, vocab_size), reproducibly."""
    if not 0 < m <= min(MAX_SAMPLE_IDS, vocab_size):
        raise ValueError(f"m={m} must be in 1..{min(MAX_SAMPLE_IDS, vocab_size)}")
    return sorted(random.Random(seed).sample(range(vocab_size), m))


def kl_estimate(p_logprobs: dict[int, float], q_logprobs: dict[int, float], *, vocab_size: int) -> float:
    """Unbiased uniform-sample estimate of KL(P||Q) from both log-probs on the same sampled ids."""
    if set(p_logprobs) != set(q_logprobs) or not p_logprobs:
        raise ValueError("P and Q must give log-probs for the same, non-empty set of token ids")
    total = 0.0
    for v, lp in p_logprobs.items():
        lq = q_logprobs[v]
        p = math.exp(lp)
        total += p * ((lp - lq) + math.exp(lq - lp) - 1.0)
    return vocab_size / len(p_logprobs) * total


def agreement(reference: Sequence[int], other: Sequence[int]) -> tuple[float, int]:
    """(fraction of positions with the same token, length of the common prefix)."""
    n = min(len(reference), len(other))
    if n == 0:
        return 0.0, 0
    same = sum(a == b for a, b in zip(reference[:n], other[:n]))
    prefix = next((i for i in range(n) if reference[i] != other[i]), n)
    return same / n, prefix


def parse_token_id(token: str) -> int:
    if not token.startswith(TOKEN_ID_PREFIX):
        raise ValueError(f"expected '{TOKEN_ID_PREFIX}N' (return_tokens_as_token_ids), got {token!r}")
    return int(token[len(TOKEN_ID_PREFIX):])


@dataclass
class PromptResult:
    """What one server said about one prompt."""

    greedy: list[int] = field(default_factory=list)
    sampled_logprobs: dict[int, float] = field(default_factory=dict)
    error: str = ""


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post(url.rstrip("/") + "/v1/completions", json=body, timeout=600)
    data = resp.json()
    if resp.status_code != 200:
        raise RuntimeError(f"HTTP {resp.status_code}: {str(data)[:300]}")
    return data


_ERRORS = (httpx.HTTPError, RuntimeError, KeyError, IndexError, ValueError)


def _common(model: str, prompt_ids: list[int]) -> dict[str, Any]:
    return {"model": model, "prompt": prompt_ids, "temperature": 0.0, "return_tokens_as_token_ids": True}


async def query_greedy(client: httpx.AsyncClient, url: str, model: str, prompt_ids: list[int], *,
                       greedy_tokens: int, out: PromptResult) -> None:
    try:
        r = await _post(client, url, {**_common(model, prompt_ids), "max_tokens": greedy_tokens, "logprobs": 0,
                                      "ignore_eos": True})
        out.greedy = [parse_token_id(t) for t in r["choices"][0]["logprobs"]["tokens"]]
    except _ERRORS as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:300]


async def query_scored(client: httpx.AsyncClient, url: str, model: str, prompt_ids: list[int], *,
                       ids: list[int], salt: str, out: PromptResult) -> None:
    """The sampled ids' log-probs at the first generated position. vLLM 0.33.0's rejection sampler
    (any step holding a draft token) drops `logprob_token_ids`, and a fully cached prompt is admitted
    with placeholder drafts: so this runs only after every greedy request has finished, and with a
    `cache_salt` of its own so the prompt is prefilled, not found in the prefix cache."""
    try:
        r = await _post(client, url, {**_common(model, prompt_ids), "max_tokens": 1, "logprobs": 1,
                                      "logprob_token_ids": ids, "cache_salt": salt})
        top = r["choices"][0]["logprobs"]["top_logprobs"][0]
        got = {parse_token_id(k): float(v) for k, v in top.items()}
        missing = set(ids) - set(got)
        if missing:
            raise RuntimeError(f"server returned no log-prob for {len(missing)} of the {len(ids)} sampled ids")
        # vLLM adds the token it sampled when that is not among the asked ids: it differs
        # between servers, and the estimator needs the same ids on both sides.
        out.sampled_logprobs = {i: got[i] for i in ids}
    except _ERRORS as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:300]


async def query_server(
    url: str, model: str, prompts: list[list[int]], *, ids_per_prompt: list[list[int]], greedy_tokens: int,
    concurrency: int = 32,
) -> list[PromptResult]:
    """Two phases: every greedy continuation, then (none decoding any more) every scored request."""
    gate = asyncio.Semaphore(concurrency)
    results = [PromptResult() for _ in prompts]
    run = uuid.uuid4().hex[:12]
    async with httpx.AsyncClient(trust_env=False) as client:

        async def greedy(i: int) -> None:
            async with gate:
                await query_greedy(client, url, model, prompts[i], greedy_tokens=greedy_tokens, out=results[i])

        async def scored(i: int) -> None:
            if results[i].error:
                return
            async with gate:
                await query_scored(client, url, model, prompts[i], ids=ids_per_prompt[i],
                                   salt=f"qfn-fidelity-{run}-{i}", out=results[i])

        await asyncio.gather(*(greedy(i) for i in range(len(prompts))))
        await asyncio.gather(*(scored(i) for i in range(len(prompts))))
    return results


def compare(reference: list[PromptResult], other: list[PromptResult], *, vocab_size: int) -> dict[str, Any]:
    """Agreement and KL of `other` against `reference` (the bf16 KV server), prompt by prompt."""
    kls, agree, prefixes, first_same, errors = [], [], [], [], []
    for ref, got in zip(reference, other, strict=True):
        if ref.error or got.error:
            errors.append(ref.error or got.error)
            continue
        try:
            kl = kl_estimate(ref.sampled_logprobs, got.sampled_logprobs, vocab_size=vocab_size)
        except ValueError as exc:  # one prompt's mismatch is that prompt's error, not the phase's
            errors.append(str(exc))
            continue
        frac, prefix = agreement(ref.greedy, got.greedy)
        agree.append(frac)
        prefixes.append(prefix)
        first_same.append(bool(ref.greedy and got.greedy and ref.greedy[0] == got.greedy[0]))
        kls.append(kl)
    n = len(kls)
    return {
        "prompts": n,
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "mean_kl": statistics.fmean(kls) if kls else None,
        "kl_standard_error": statistics.stdev(kls) / math.sqrt(n) if n > 1 else None,
        "median_kl": statistics.median(kls) if kls else None,
        "greedy_agreement": statistics.fmean(agree) if agree else None,
        "first_token_agreement": statistics.fmean(first_same) if first_same else None,
        "mean_common_prefix": statistics.fmean(prefixes) if prefixes else None,
    }
