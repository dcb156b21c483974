"""Metric math and SSE parsing of builder.measure.client (shipped as benchmark_vllm.py) on recorded-shape streams."""

from __future__ import annotations

import json

import pytest

from builder.measure import client as bench


def _chunk(text: str | None, *, chat: bool = False, finish: str | None = None) -> str:
    choice = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {} if text is None else {"content": text}
    else:
        choice["text"] = text or ""
    return json.dumps({"id": "x", "choices": [choice]})


USAGE = json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}})


def test_sse_parser_splits_events_across_chunk_boundaries_and_skips_comments_and_done():
    raw = (
        ": ping\n\n"
        f"data: {_chunk('a')}\n\n"
        f"data: {_chunk('b')}\r\n\r\n"
        "data: [DONE]\n\n"
    )
    parser = bench.SSEParser()
    got = []
    for i in range(0, len(raw), 7):  # feed in awkward 7-char pieces
        got += parser.feed(raw[i:i + 7])
    got += parser.close()
    assert [json.loads(p)["choices"][0]["text"] for p in got] == ["a", "b"]


def test_ttft_counts_first_choice_event_even_with_empty_text_and_usage_gives_tpot():
    start = 100.0
    events = [
        (100.5, _chunk(None, chat=True)),  # role-only first chunk: still TTFT
        (100.6, _chunk("Hel", chat=True)),
        (100.8, _chunk("lo", chat=True)),
        (101.0, _chunk("!", chat=True, finish="stop")),
        (101.01, USAGE),  # usage chunk has empty choices: not a token event
    ]
    out = bench.output_from_events(start, events)
    assert out.success
    assert out.ttft == pytest.approx(0.5)
    assert out.itl == pytest.approx([0.1, 0.2, 0.2])
    assert out.latency == pytest.approx(1.0)  # last token event, not the usage chunk
    assert out.output_tokens == 4 and out.prompt_tokens == 12
    assert out.text == "Hello!" and out.finish_reason == "stop"
    assert out.decode_tok_s == pytest.approx(3 / 0.5)
    summary = bench.summarize([out], duration_s=2.0)
    assert summary["mean_tpot_ms"] == pytest.approx((1.0 - 0.5) / 3 * 1000)
    assert summary["mean_ttft_ms"] == pytest.approx(500)
    assert summary["output_throughput"] == pytest.approx(2.0)
    assert summary["request_throughput"] == pytest.approx(0.5)
    assert summary["completed"] == 1 and summary["failed"] == 0


def test_error_event_and_empty_stream_are_failures_not_zero_latencies():
    err = bench.output_from_events(0.0, [(0.1, json.dumps({"object": "error", "message": "too long"}))])
    assert not err.success and "too long" in err.error
    empty = bench.output_from_events(0.0, [(0.1, USAGE)])
    assert not empty.success
    s = bench.summarize([err, empty], duration_s=1.0)
    assert s["completed"] == 0 and s["failed"] == 2 and s["mean_ttft_ms"] == 0.0


def test_percentiles_and_std_match_numpy_defaults():
    vals = [1.0, 2.0, 3.0, 4.0, 10.0]
    # numpy.percentile(vals, [50, 90, 95, 99]) -> 3.0, 7.6, 8.8, 9.76 ; numpy.std -> 3.1622776
    d = bench.describe(vals, "x", unit="")
    assert d["p50_x"] == pytest.approx(3.0)
    assert d["p90_x"] == pytest.approx(7.6)
    assert d["p95_x"] == pytest.approx(8.8)
    assert d["p99_x"] == pytest.approx(9.76)
    assert d["std_x"] == pytest.approx(3.1622776, rel=1e-6)
    assert d["median_x"] == 3.0 and d["mean_x"] == 4.0


def test_single_token_output_has_no_tpot_sample():
    one = bench.output_from_events(0.0, [(0.2, _chunk("a")), (0.21, json.dumps({"choices": [], "usage": {"completion_tokens": 1, "prompt_tokens": 3}}))])
    s = bench.summarize([one], duration_s=1.0)
    assert s["completed"] == 1 and s["mean_tpot_ms"] == 0.0 and s["mean_ttft_ms"] == pytest.approx(200)


def test_ab_deltas_are_per_pair_with_spread():
    pairs = [
        ({"ttft_ms": 100.0, "decode_tok_s": 50.0, "mtp_acceptance": None, "kv_pool_tokens": 1000},
         {"ttft_ms": 110.0, "decode_tok_s": 50.0, "mtp_acceptance": None, "kv_pool_tokens": 2000}),
        ({"ttft_ms": 200.0, "decode_tok_s": 40.0, "mtp_acceptance": None, "kv_pool_tokens": 1000},
         {"ttft_ms": 180.0, "decode_tok_s": 44.0, "mtp_acceptance": None, "kv_pool_tokens": 2000}),
    ]
    d = bench.ab_deltas(pairs)
    assert d["ttft_ms"]["delta_pct_mean"] == pytest.approx(0.0)  # +10% and -10%
    assert d["ttft_ms"]["delta_pct_spread"] == pytest.approx(14.142, rel=1e-3)
    assert d["decode_tok_s"]["delta_pct_mean"] == pytest.approx(5.0)
    assert d["kv_pool_tokens"]["delta_pct_mean"] == pytest.approx(100.0)
    assert d["mtp_acceptance"]["pairs"] == 0 and d["mtp_acceptance"]["delta_pct_mean"] is None
    assert "+100.0%" in bench.format_ab_table({"a": {"label": "auto"}, "b": {"label": "fp8"}, "deltas": d})


def test_suite_refuses_prefill_lengths_beyond_the_context():
    with pytest.raises(ValueError, match="max_model_len=8192"):
        bench.standard_suite(8192, prefill_lens=[9000])
    suite = bench.standard_suite(8192)
    prefill = [w.input_len for w in suite if w.kind == "prefill"]
    assert prefill == [1024, 2048, 4096, 8128]
    assert {w.kind for w in suite} == {"prefill", "decode", "concurrent2", "concurrency"}


def test_crosscheck_table_reports_difference_of_means_and_per_round_spread():
    from builder.measure.crosscheck import KEYS, diff_table

    ours = [{k: 110.0 for k in KEYS}, {k: 90.0 for k in KEYS}]
    theirs = [{k: 100.0 for k in KEYS}, {k: 100.0 for k in KEYS}]
    rows, md = diff_table(ours, theirs)
    ttft = next(r for r in rows if r["metric"] == "mean_ttft_ms")
    assert ttft["diff_pct"] == 0.0 and ttft["per_round_diff_pct"] == [10.0, -10.0]
    assert "-10.0% .. +10.0%" in md
