"""make_prompt's search (builder.measure.client `largest_fitting`): the bisection's answer in
a handful of /tokenize round trips. The live test (test_live.py) checks it against a real
tokenizer; these check the search itself on counts of known shape against brute force."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from builder.measure import client as bench


def _fit(counts: list[int], limit: int) -> tuple[int, int]:
    calls = 0

    async def count(k: int) -> int:
        nonlocal calls
        calls += 1
        return counts[k]

    return asyncio.run(bench.largest_fitting(count, limit, len(counts) - 1)), calls


def _brute(counts: list[int], limit: int) -> int:
    return max(k for k, c in enumerate(counts) if c <= limit or k == 0)


def _word_counts(n_words: int, seed: int) -> list[int]:
    """Cumulative tokens of a random-word prompt: 1-3 tokens a word, plus a head of 6."""
    rng = random.Random(seed)
    counts = [6]
    for _ in range(n_words):
        counts.append(counts[-1] + rng.choice((1, 1, 1, 2, 2, 3)))
    return counts


@pytest.mark.parametrize("n_tokens", [8, 200, 8192, 32768, 131072])
def test_word_like_counts_fit_in_a_few_calls(n_tokens):
    counts = _word_counts(int(n_tokens * 1.2) + 8, seed=n_tokens)
    k, calls = _fit(counts, n_tokens)
    assert k == _brute(counts, n_tokens)
    # Bisection needs ~log2(words) = 18 at 128K; this about 5.
    assert calls <= 8, calls


@pytest.mark.parametrize("shape", ["steps", "convex", "concave", "plateau-then-jump"])
def test_any_monotone_count_gets_the_bisection_answer_within_three_times_its_calls(shape):
    n = 50_000
    if shape == "steps":
        counts = [k // 97 * 97 for k in range(n + 1)]
    elif shape == "convex":
        counts = [k * k // 1000 for k in range(n + 1)]
    elif shape == "concave":
        counts = [int(1000 * math.log1p(k)) for k in range(n + 1)]
    else:
        counts = [k // 10 if k < n - 5 else 10 * k for k in range(n + 1)]
    for limit in (0, 1, 96, 97, 4_000, 7_000, counts[-1] - 1, counts[-1]):
        k, calls = _fit(counts, limit)
        assert k == _brute(counts, limit), (shape, limit)
        assert calls <= 3 * math.ceil(math.log2(n)) + 1, (shape, limit, calls)


def test_everything_fits_in_one_call_and_a_head_too_long_gives_zero():
    assert _fit([3, 4, 5], 10) == (2, 1)
    assert _fit([30, 40, 50], 10)[0] == 0


def test_given_prompts_must_be_one_per_request_plus_the_warm_up():
    import httpx

    wl = bench.Workload("in64-c1", "concurrency", 64, 4, 2, 1)

    async def go():
        async with httpx.AsyncClient() as client:  # refused before any request is sent
            await bench.run_workload(client, "http://127.0.0.1:9", "m", wl, prompts=["a", "b"])

    with pytest.raises(ValueError, match=r"prompts: 2 given, but workload in64-c1 sends num_prompts \+ 1 = 3"):
        asyncio.run(go())
