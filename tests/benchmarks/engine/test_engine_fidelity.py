"""Fidelity math: the KL estimator is exact on the full vocabulary, unbiased and non-negative on
samples, and agreement counts what it says."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from benchmarks.engine import fidelity


def log_softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    z = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - z for x in xs]


def pair(v: int, noise: float, seed: int = 0) -> tuple[dict[int, float], dict[int, float]]:
    rng = random.Random(seed)
    logits = [rng.gauss(0, 0.3) for _ in range(v)]  # as flat as the random-weight model's
    p = log_softmax(logits)
    q = log_softmax([x + rng.gauss(0, noise) for x in logits])
    return dict(enumerate(p)), dict(enumerate(q))


def exact_kl(p: dict[int, float], q: dict[int, float]) -> float:
    return sum(math.exp(p[v]) * (p[v] - q[v]) for v in p)


def test_full_vocabulary_gives_the_exact_kl():
    p, q = pair(500, 0.05)
    assert fidelity.kl_estimate(p, q, vocab_size=500) == pytest.approx(exact_kl(p, q), rel=1e-9)


def test_identical_distributions_give_zero():
    p, _ = pair(300, 0.0)
    assert fidelity.kl_estimate(p, dict(p), vocab_size=300) == 0.0


def test_samples_are_unbiased_and_never_negative():
    """The (q/p - 1) term makes every summand >= 0: without it a sample can come out negative
    and the mean over samples is far noisier."""
    p, q = pair(2000, 0.05, seed=3)
    truth = exact_kl(p, q)
    estimates = []
    for seed in range(300):
        ids = fidelity.sample_ids(vocab_size=2000, m=128, seed=seed)
        est = fidelity.kl_estimate({v: p[v] for v in ids}, {v: q[v] for v in ids}, vocab_size=2000)
        assert est >= 0
        estimates.append(est)
    assert statistics.fmean(estimates) == pytest.approx(truth, rel=0.05)


def test_larger_perturbations_give_larger_kl():
    small, large = pair(1000, 0.01, seed=5), pair(1000, 0.1, seed=5)
    ids = fidelity.sample_ids(vocab_size=1000, m=128, seed=1)
    est = [fidelity.kl_estimate({v: a[v] for v in ids}, {v: b[v] for v in ids}, vocab_size=1000)
           for a, b in (small, large)]
    assert est[0] < est[1]


def test_sample_ids_are_reproducible_distinct_and_bounded():
    a = fidelity.sample_ids(vocab_size=49154, m=128, seed=7)
    assert a == fidelity.sample_ids(vocab_size=49154, m=128, seed=7)
    assert len(set(a)) == 128 and 0 <= min(a) and max(a) < 49154
    with pytest.raises(ValueError, match="m=129"):
        fidelity.sample_ids(vocab_size=49154, m=129, seed=0)


def test_mismatched_token_sets_are_refused():
    with pytest.raises(ValueError, match="same"):
        fidelity.kl_estimate({1: -1.0}, {2: -1.0}, vocab_size=10)


def test_agreement_and_common_prefix():
    assert fidelity.agreement([1, 2, 3, 4], [1, 2, 9, 4]) == (0.75, 2)
    assert fidelity.agreement([1, 2], [1, 2]) == (1.0, 2)
    assert fidelity.agreement([], [1]) == (0.0, 0)


def test_token_ids_come_back_as_placeholders():
    assert fidelity.parse_token_id("token_id:49152") == 49152
    with pytest.raises(ValueError, match="return_tokens_as_token_ids"):
        fidelity.parse_token_id("hello")


def test_compare_counts_errors_and_averages_the_rest():
    p, q = pair(50, 0.05)
    ref = [fidelity.PromptResult(greedy=[1, 2, 3], sampled_logprobs=p)] * 2
    got = [fidelity.PromptResult(greedy=[1, 2, 4], sampled_logprobs=q), fidelity.PromptResult(error="HTTP 500")]
    out = fidelity.compare(ref, got, vocab_size=50)
    assert out["prompts"] == 1 and out["errors"] == 1 and out["error_examples"] == ["HTTP 500"]
    assert out["greedy_agreement"] == pytest.approx(2 / 3)
    assert out["first_token_agreement"] == 1.0
    assert out["mean_kl"] == pytest.approx(exact_kl(p, q))


def _kind(body: dict) -> str:
    return "scored" if body.get("logprob_token_ids") else "greedy"


def _completion(body: dict, vocab: int = 64) -> dict:
    """/v1/completions as vLLM answers: token ids as placeholders and, for a scored request, the asked
    ids' log-probs plus (as vLLM does) the token it sampled, here one outside them."""
    n = body["max_tokens"]
    top = ([{**{f"token_id:{t}": -4.0 for t in body["logprob_token_ids"]}, f"token_id:{vocab + n}": -0.5}]
           if _kind(body) == "scored" else None)
    return {"choices": [{"logprobs": {"tokens": [f"token_id:{i % vocab}" for i in range(n)], "top_logprobs": top}}]}


def test_scored_requests_start_after_every_greedy_one_ended_each_with_its_own_cache_salt(recording_server):
    """vLLM 0.33.0 drops logprob_token_ids in any step holding a draft token (on the H200, eager, 97
    of 100 prompts lost them): no greedy decode may overlap a scored request, and no scored prompt may
    come from the prefix cache (a cached prompt is admitted with placeholder drafts)."""
    import asyncio

    srv = recording_server(_completion, delay=lambda body: 0.05 if _kind(body) == "greedy" else 0.01)
    prompts = [[1, 2, 3, i] for i in range(12)]
    ids = [fidelity.sample_ids(vocab_size=64, m=8, seed=i) for i in range(12)]
    res = asyncio.run(fidelity.query_server(srv.url, "m", prompts, ids_per_prompt=ids, greedy_tokens=4, concurrency=5))
    assert all(not r.error and len(r.sampled_logprobs) == 8 and len(r.greedy) == 4 for r in res)
    greedy = [r for r in srv.requests if _kind(r["body"]) == "greedy"]
    scored = [r for r in srv.requests if _kind(r["body"]) == "scored"]
    assert min(r["start"] for r in scored) >= max(r["end"] for r in greedy)
    salts = [r["body"].get("cache_salt") for r in scored]
    assert len(salts) == 12 and None not in salts and len(set(salts)) == 12
    assert all("cache_salt" not in r["body"] for r in greedy)


def test_a_prompt_whose_ids_differ_is_that_prompts_error_not_the_comparisons():
    p, q = pair(50, 0.05)
    ref = [fidelity.PromptResult(greedy=[1], sampled_logprobs=p)] * 2
    got = [fidelity.PromptResult(greedy=[1], sampled_logprobs=q),
           fidelity.PromptResult(greedy=[1], sampled_logprobs={**q, 99: -1.0})]
    out = fidelity.compare(ref, got, vocab_size=50)
    assert out["prompts"] == 1 and out["errors"] == 1 and "same" in out["error_examples"][0]
