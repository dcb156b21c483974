"""The decode-step breakdown on synthetic profiler traces: which kernels make steps and windows,
how GPU time is clipped, unioned and summed, the kernel families, and the small summary the GPU
host writes."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from benchmarks.engine import breakdown as bd

#: What every trace also holds and the breakdown must pass over: flow, metadata, a CPU op and a CPU
#: step annotation (traces recorded with CPU activity), a runtime call, a kernel without a duration,
#: and a step kernel without a grid.
NOISE = [
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "ts": 5.0, "pid": 1, "tid": 1},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "ts": 6.0, "pid": 0, "tid": 7},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 500.0, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_4(4)", "ts": 40.0, "dur": 5.0,
     "pid": 1, "tid": 1},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 2.0, "dur": 3.0, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "kernel", "name": "no_duration_kernel", "ts": 3.0, "pid": 0, "tid": 7},
    {"ph": "X", "cat": "kernel", "name": bd.STEP_KERNEL, "ts": 45.0, "dur": 0.0, "pid": 0, "tid": 7},
]


def step(ts: float, *, ctx: int = 0, gen: int = 4, corr: int | None = None) -> list[dict]:
    """The kernels that open a step on the GPU: the step kernel on a grid of requests + 1, and the
    prefill kernel where the step prefills (`ctx` requests of its own: 1 or 0 here). No duration, so
    they add no GPU time; `corr` ties the step kernel to a host launch."""
    args: dict = {"grid": [ctx + gen + 1, 1, 1]}
    if corr is not None:
        args["correlation"] = corr
    out = [{"ph": "X", "cat": "kernel", "name": bd.STEP_KERNEL, "ts": ts, "dur": 0.0, "pid": 0, "tid": 7, "args": args}]
    if ctx:
        out.append({"ph": "X", "cat": "kernel", "name": bd.PREFILL_KERNEL, "ts": ts, "dur": 0.0, "pid": 0, "tid": 7,
                    "args": {"grid": [ctx + gen, 1, 1]}})
    return out


def kernel(name: str, ts: float, dur: float, *, stream: int = 7, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream}


def steps_at(*starts: float, gen: int = 4) -> list[dict]:
    return [e for t in starts for e in step(t, gen=gen)]


def write(path, events: list[dict]):
    doc = json.dumps({"traceEvents": NOISE + events, "deviceProperties": []}).encode()
    path.write_bytes(gzip.compress(doc) if path.name.endswith(".gz") else doc)
    return path


def test_a_gz_and_a_plain_trace_give_their_events(tmp_path):
    events = step(0.0) + [kernel("k", 1.0, 2.0)]
    for name in ("w.pt.trace.json.gz", "w.pt.trace.json"):
        assert bd.load_trace(write(tmp_path / name, events)) == NOISE + events


@pytest.mark.parametrize("content", [b'{"foo": 1}', b'[{"ph": "X"}]', b'{"traceEvents": {}}', b"not json",
                                     gzip.compress(b'{"traceEvents": [')[:-4]])
def test_a_file_that_is_no_chrome_trace_is_named(tmp_path, content):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.json.gz: not a Chrome trace"):
        bd.load_trace(path)


def test_the_step_kernels_grid_and_the_prefill_kernel_make_the_step_kind():
    events = step(0, gen=4) + step(100, ctx=1, gen=0) + step(200, ctx=1, gen=3) + step(300, gen=0) + step(400)
    assert [(s.kind.kind, s.kind.requests, s.kind.gen_requests) for s in bd._steps(events + NOISE)] == [
        ("decode", 4, 4), ("prefill", 1, 0), ("mixed", 4, 3), ("empty", 0, 0), ("decode", 4, 4)]
    # A prefill kernel belongs to the step it starts in, not to the one before.
    late = step(0) + step(100) + [{**step(150, ctx=1, gen=0)[1]}]
    assert [s.kind.kind for s in bd._steps(late)] == ["decode", "mixed"]


def test_overlapping_kernels_on_two_streams_are_busy_once_and_summed_twice():
    events = steps_at(0, 100, 200)
    for t in (0, 100):
        events += [kernel("a", t + 10, 40, stream=7), kernel("b", t + 30, 40, stream=8)]
    b = bd.decode_breakdown(NOISE + events, skip_first=0)
    assert b.steps == 2 and b.step_us == 100
    assert b.gpu_busy_us == pytest.approx(60)  # [10, 70), not 40 + 40
    assert b.idle_us == pytest.approx(40)
    assert b.kernels["a"] == {"us_per_step": 40, "calls_per_step": 1}
    assert b.overlap_us == pytest.approx(20)
    assert sum(k["us_per_step"] for k in b.kernels.values()) == pytest.approx(b.gpu_busy_us + b.overlap_us)


def test_a_kernel_straddling_a_step_boundary_is_clipped_and_called_once():
    events = steps_at(0, 100, 200) + [kernel("long", 50, 100)]
    b = bd.decode_breakdown(events, skip_first=0)
    assert b.gpu_busy_us == pytest.approx(50)  # 50 in each window
    assert b.kernels["long"] == {"us_per_step": 50, "calls_per_step": 0.5}
    assert b.overlap_us == pytest.approx(0)


def test_gpu_work_longer_than_the_steps_never_makes_busy_exceed_wall():
    events = steps_at(0, 100, 200, 300) + [kernel("huge", -50, 1000), kernel("small", 20, 10, stream=8)]
    b = bd.decode_breakdown(events, skip_first=0)
    assert b.gpu_busy_us == pytest.approx(b.step_us) and b.idle_us == pytest.approx(0)
    assert b.kernels["huge"] == {"us_per_step": 100, "calls_per_step": 0}  # started before the first window


def test_prefill_and_mixed_steps_are_not_measured_but_end_the_decode_step_before():
    events = step(0) + step(60, ctx=1, gen=0) + step(100) + step(130, ctx=1, gen=3) + step(200) + step(300)
    events += [kernel("decode_k", 10, 20), kernel("prefill_k", 70, 20), kernel("mixed_k", 140, 50)]
    b = bd.decode_breakdown(events, skip_first=0)
    assert b.steps == 3
    assert b.step_us == pytest.approx((60 + 30 + 100) / 3)
    assert set(b.kernels) == {"decode_k"}


def test_cpu_annotations_make_no_steps_and_a_trace_of_only_them_says_so():
    b = bd.decode_breakdown(NOISE + steps_at(0, 100, 200), skip_first=0)
    assert b.steps == 2 and b.step_us == 100
    with pytest.raises(ValueError, match="0 steps by _prepare_pos_seq_lens_kernel.*CPU annotations but no step kernel"):
        bd.decode_breakdown(NOISE, skip_first=0)


def test_skip_first_drops_the_first_decode_steps_and_gen_requests_filters():
    lengths = [10, 20, 30, 40, 50, 60, 70]  # G=4 for the first four, G=8 for the last three
    starts = [sum(lengths[:i]) for i in range(len(lengths) + 1)]
    events = [e for i, t in enumerate(starts[:-1]) for e in step(t, gen=4 if i < 4 else 8)] + step(starts[-1], ctx=1, gen=0)
    b = bd.decode_breakdown(events, skip_first=2)
    assert (b.steps, b.step_us, b.gen_requests) == (5, 50, 8)
    b = bd.decode_breakdown(events, gen_requests=4, skip_first=1)
    assert (b.steps, b.step_us, b.step_us_median, b.gen_requests) == (3, 30, 30, 4)
    b = bd.decode_breakdown(events, gen_requests=8, skip_first=0)
    assert (b.steps, b.step_us, b.gen_requests) == (3, 60, 8)


def test_the_median_is_the_middle_step_not_the_mean():
    b = bd.decode_breakdown(steps_at(0, 10, 30, 120), skip_first=0)
    assert (b.step_us, b.step_us_median) == (40, 20)


def test_no_decode_step_names_what_the_trace_holds():
    events = step(0, ctx=1, gen=0) + step(100, ctx=1, gen=0) + step(200, ctx=1, gen=2) + step(300, gen=0)
    with pytest.raises(ValueError, match=r"4 steps by \w+ \(prefill 2, mixed 1, decode 0, empty 1\)"):
        bd.decode_breakdown(events)
    with pytest.raises(ValueError, match=r"decode 3.*by gen_requests: 4: 3; 0 with gen_requests=8"):
        bd.decode_breakdown(steps_at(0, 100, 200), gen_requests=8)
    with pytest.raises(ValueError, match="no following step.*skip_first=2"):
        bd.decode_breakdown(steps_at(0, 100, 200), skip_first=2)


@pytest.mark.parametrize(("name", "cat", "family"), [
    ("void vllm::moe::topkGatingSoftmax<4, 128, 4, 16>(float const*, bool const*, int*)", "kernel", "MoE / MLP"),
    ("topk_softmax_kernel", "kernel", "MoE / MLP"),
    ("fused_moe_kernel", "kernel", "MoE / MLP"),
    ("_qsa_cooperative_topk_kernel", "kernel", "QSA indexer"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", "kernel", "QSA indexer"),
    ("_qsa_decode_int8_kernel", "kernel", "QSA attention"),
    ("kernel_unified_attention_2d", "kernel", "QSA attention"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "kernel", "GDN"),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>", "kernel", "norm / hyper-connection"),
    ("_ple_lookup_kernel", "kernel", "PLE lookup"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float>", "kernel", "PLE lookup"),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "kernel", "MoE / MLP"),
    ("gumbel_sample_kernel", "kernel", "sampler"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>",
     "kernel", "sampler"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>", "kernel", "KV write"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "kernel", "elementwise"),
    ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", "memcpy"),
    ("Memset (Device)", "gpu_memset", "memset"),
    ("Memcpy DtoD (Device -> Device)", "kernel", "other"),
    ("some_new_kernel", "kernel", "other"),
])
def test_classify(name, cat, family):
    assert bd.classify(name, cat=cat) == family


def test_families_are_named_once_and_leave_other_last():
    names = [f for f, _ in bd.FAMILIES]
    assert len(names) == len(set(names)) and bd.OTHER not in names
    assert names.index("QSA indexer") < names.index("QSA attention") < names.index("MoE / MLP")


def test_the_family_table_sums_to_the_step_without_overlap():
    events = steps_at(0, 100, 200, 300)
    for t in (0, 100, 200):
        events += [kernel("fused_moe_kernel", t + 5, 20), kernel("_qsa_decode_int8_kernel", t + 30, 15),
                   kernel("Memcpy HtoD (Pinned -> Device)", t + 50, 4, cat="gpu_memcpy"),
                   kernel("mystery", t + 60, 1)]
    b = bd.decode_breakdown(events, skip_first=0)
    table = bd.family_table(b)
    assert list(table) == ["QSA attention", "MoE / MLP", "memcpy", "other", bd.IDLE_ROW]
    assert table["memcpy"] == pytest.approx(4) and table[bd.IDLE_ROW] == pytest.approx(60)
    assert b.overlap_us == pytest.approx(0)
    assert sum(table.values()) == pytest.approx(b.step_us)
    assert sum(v for k, v in table.items() if k != bd.IDLE_ROW) == pytest.approx(b.gpu_busy_us)


def test_idle_time_is_split_by_the_gpu_work_each_gap_follows():
    """The gather path's signature: the stream idles after the ids' device-to-host copy until the host
    function is done. Per step of 100 us: 5 us before any work, 10 after the first kernel, 40 after the
    DtoH copy, 25 at the end, which the next step's first 5 us continue (after the norm kernel that ended
    last of two overlapping ones); the gaps sum to idle_us."""
    events = steps_at(0, 100, 200, 300)
    for t in (0, 100, 200):
        events += [kernel("fused_moe_kernel", t + 5, 10),
                   kernel("Memcpy DtoH (Device -> Pinned)", t + 25, 5, cat="gpu_memcpy"),
                   kernel("Memcpy HtoD (Pinned -> Device)", t + 70, 2, cat="gpu_memcpy"),
                   kernel("_qsa_decode_int8_kernel", t + 72, 1), kernel("rms_norm_kernel", t + 72, 3, stream=9)]
    b = bd.decode_breakdown(events, skip_first=0)
    assert b.idle_after == pytest.approx({"memcpy DtoH": 40, "norm / hyper-connection": 25 + 2 * 5 / 3,
                                          "MoE / MLP": 10, "start": 5 / 3})
    assert list(b.idle_after)[0] == "memcpy DtoH"
    assert sum(b.idle_after.values()) == pytest.approx(b.idle_us)


def test_a_gap_before_the_first_window_is_named_by_the_work_before_it():
    events = [kernel("Memcpy DtoH (Device -> Pinned)", 0, 5, cat="gpu_memcpy")] + steps_at(10, 110, 210)
    events += [kernel("gemm", 50, 10), kernel("gemm", 150, 10)]
    b = bd.decode_breakdown(events, skip_first=0)
    assert b.idle_after == pytest.approx({"memcpy DtoH": 40 / 2, "MoE / MLP": (50 + 40 + 50) / 2})


def test_the_idle_row_stays_when_the_gpu_never_waits():
    b = bd.decode_breakdown(steps_at(0, 100, 200) + [kernel("gemm", 0, 200)], skip_first=0)
    assert bd.family_table(b) == {"MoE / MLP": 100, bd.IDLE_ROW: 0}


def test_the_summary_is_json_and_keeps_the_longest_kernels(tmp_path):
    events = steps_at(0, 5000, 10000, 15000, 20000)  # 2 warm-up steps skipped, 2 measured
    for t in (10000, 15000):
        events += [kernel(f"k{i:02d}", t + sum(range(i)), i, stream=7 + i % 3) for i in range(1, 76)]
    summary = bd.summarize(write(tmp_path / "w.pt.trace.json.gz", events))
    assert json.loads(json.dumps(summary)) == summary
    assert list(summary) == ["trace", "tokens", "decode", "mixed"] and summary["trace"] == "w.pt.trace.json.gz"
    decode = summary["decode"]
    names = list(decode["kernels"])
    assert len(names) == 61 and names[:3] == ["k75", "k74", "k73"] and names[59] == "k16"
    assert names[-1] == "(15 other kernels)"
    assert decode["kernels"][names[-1]] == {"us_per_step": sum(range(1, 16)), "calls_per_step": 15}
    assert decode["steps"] == 2
    assert sum(decode["families"].values()) == pytest.approx(decode["step_us"] + decode["overlap_us"], abs=0.01)
    # Four decode steps hand out a token each to G=4 requests (the last step has no known period).
    assert summary["tokens"]["tokens"] == {"decode": 16, "mixed": 0}
    assert summary["tokens"]["median_period_us"] == 5000
    assert "no step of the kind asked for" in summary["mixed"]["error"]


def test_a_trace_that_missed_decode_is_summarized_with_the_reason_and_only_a_non_trace_raises(tmp_path):
    """A profiled pass that caught only prefill steps still gives its summary: the reason stands under
    `decode` (and `mixed`), naming what the trace holds. A file that is not a trace raises, naming it."""
    path = write(tmp_path / "prefill.pt.trace.json", step(0, ctx=1, gen=0) + step(100, ctx=1, gen=0))
    summary = bd.summarize(path)
    assert json.loads(json.dumps(summary)) == summary and summary["trace"] == "prefill.pt.trace.json"
    assert set(summary["decode"]) == {"error"} and set(summary["mixed"]) == {"error"}
    assert re.search(r"2 steps by \w+ \(prefill 2, mixed 0, decode 0, empty 0\)", summary["decode"]["error"])
    assert summary["tokens"]["steps"] == {"prefill": 2, "mixed": 0, "decode": 0}
    assert summary["tokens"]["median_period_us"] is None
    bad = tmp_path / "cut.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    with pytest.raises(ValueError, match=re.escape(str(bad)) + ": not a Chrome trace"):
        bd.summarize(bad)


def launch(name: str, ts: float, dur: float, corr: int, *, cat: str = "cuda_runtime") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"correlation": corr}}


def test_the_host_side_is_read_from_the_cuda_calls_tied_to_the_step_kernels():
    """Three decode steps of 100 us on the GPU; on the host each step is one step-kernel launch, 30 us
    of work, a QSA kernel launch, a sync of 20 us, and a graph launch, and the host's windows run from
    one step kernel's launch to the next's (90 us apart, not the GPU's 100: the host runs ahead)."""
    events = []
    for i, t in enumerate((0.0, 90.0, 180.0, 270.0)):
        gpu = 1000.0 + 100 * i
        base = 10 * i
        events += step(gpu, corr=base + 1)
        events += [launch("cudaLaunchKernel", t, 2, base + 1),
                   launch("cuLaunchKernel", t + 32, 3, base + 2, cat="cuda_driver"),
                   kernel("_qsa_sparse_paged_int8_splitk_kernel", gpu + 5, 10) | {"args": {"correlation": base + 2}},
                   launch("cudaStreamSynchronize", t + 40, 20, base + 3),
                   launch("cudaGraphLaunch", t + 70, 4, base + 4)]
    b = bd.decode_breakdown(events, skip_first=0)
    assert (b.steps, b.step_us, b.host_step_us) == (3, 100, 90)
    assert b.host_calls["cudaStreamSynchronize"] == {"calls_per_step": 1, "us_per_step": 20}
    assert b.host_calls["cuLaunchKernel"] == {"calls_per_step": 1, "us_per_step": 3}
    # 30 us before the QSA launch (after the step kernel's 2), 35 before the graph launch (the sync's
    # 20 us among them: host_calls names the sync), 16 after the graph launch's end.
    assert b.host_before == pytest.approx({"QSA attention": 30, "graph": 35, "after the last launch": 16,
                                           "other": 0})
    assert list(b.host_before)[0] == "graph"
    # Every step made the same calls: that sequence, in order, names what each launched.
    assert b.host_sequence == ["cudaLaunchKernel > " + bd.STEP_KERNEL, "cuLaunchKernel > _qsa_sparse_paged_int8_splitk_kernel",
                               "cudaStreamSynchronize", "cudaGraphLaunch"]
    assert b.host_sequence_share == 1


def test_the_commonest_step_gives_the_sequence_and_a_step_with_one_more_launch_differs():
    events = []
    for i, t in enumerate((0.0, 100.0, 200.0, 300.0, 400.0)):
        events += step(1000.0 + 100 * i, corr=10 * i + 1) + [launch("cudaLaunchKernel", t, 2, 10 * i + 1)]
        events += [launch("cudaGraphLaunch", t + 50, 4, 10 * i + 2)]
        if i == 1:  # one step launches a kernel more
            events += [launch("cudaLaunchKernel", t + 60, 2, 10 * i + 3),
                       kernel("extra_kernel", 1150.0, 1.0) | {"args": {"correlation": 10 * i + 3}}]
    b = bd.decode_breakdown(events, skip_first=0)
    assert b.host_sequence == ["cudaLaunchKernel > " + bd.STEP_KERNEL, "cudaGraphLaunch"]
    assert b.host_sequence_share == pytest.approx(3 / 4)


def test_a_trace_without_host_calls_has_no_host_side():
    b = bd.decode_breakdown(steps_at(0, 100, 200), skip_first=0)
    assert (b.host_step_us, b.host_calls, b.host_before, b.host_sequence) == (None, {}, {}, [])
