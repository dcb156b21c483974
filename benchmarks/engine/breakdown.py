"""Where a decode step's time goes, read from the PyTorch profiler trace a vLLM server writes on
/stop_profile: the benchmark measures a step's wall time; this splits it into GPU time per kernel
and per kernel family, plus the time the GPU waits on the host.

The trace is recorded with CUDA activity only (no CPU ops: recording them slows the host work the
breakdown is meant to measure, by ~30% of a small model's decode step). Steps come from the GPU's own
timeline: STEP_KERNEL opens each engine step, its grid says how many requests the step runs. A
pure-decode step's window runs from its step kernel to the next one's, so it holds the step's whole
period in the engine loop, host overhead included. GPU work is every kernel, memcpy and memset event
on any stream (a CUDA graph replay shows its kernels one by one). The host side comes from the CUDA
calls CUPTI records beside the GPU work (launches, syncs, copies), tied to their kernels by correlation id.

Standard library only: it runs on the GPU host before the harness's wheels are installed.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The largest relative gap between the profiled step and the benchmark's measured step for the
#: breakdown to describe the steps that were measured.
ACCOUNTING_LIMIT = 0.10
#: Kernel names kept by `summarize`; the rest are summed into one entry, so results stay small.
SUMMARY_KERNELS = 60
#: The family_table row for the part of a step the GPU spends waiting on the host.
IDLE_ROW = "host"

#: One per engine step, launched eagerly before the forward (vLLM 0.33's GPU model runner,
#: `input_batch.prepare_pos_seq_lens`) on a grid of num_reqs + 1 programs: it opens each step's window
#: on the GPU's own clock and says how many requests the step runs. CPU-side step annotations are not
#: used: recording CPU activity slows exactly the host work a step's idle time is made of.
STEP_KERNEL = "_prepare_pos_seq_lens_kernel"
#: Launched in a step only when it prefills (`prepare_prefill_inputs`).
PREFILL_KERNEL = "_prepare_prefill_inputs_kernel"
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: How much of a kernel's name a step's host_sequence keeps: enough to tell kernels apart.
SEQUENCE_NAME_CHARS = 80
#: Host calls into CUDA, recorded with CUDA activity alone (no CPU activity needed).
HOST_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
#: Host calls that launch GPU work; the rest (syncs, event records, host functions) are counted by name.
LAUNCH_CALL = re.compile(r"^cu(?:da)?(?:LaunchKernel|LaunchKernelEx|LaunchCooperativeKernel|GraphLaunch|"
                         r"MemcpyAsync|MemsetAsync|Memcpy|Memset)", re.IGNORECASE)
_BY_CATEGORY = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_NEVER = re.compile(r"(?!)")


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


#: Names a generic top-k must not give to the QSA indexer: MoE routing (vLLM's topkGatingSoftmax,
#: topk_softmax/sigmoid, grouped_topk) and the sampler's top-k/top-p.
_NOT_INDEXER_TOPK = r"moe|expert|softmax|sigmoid|gating|grouped_top_?k|top_?p|sampl"

#: Kernel families, tried in order on the kernel's name; the first match wins, so each family sits
#: before the broader ones that would also match its kernels:
#:   KV write before QSA attention and MoE: QSA's cache writes may carry "qsa", "int8" or "quant".
#:   QSA indexer before QSA attention: indexer kernels may carry "qsa"/"sparse_attn" too. Its generic
#:     top-k skips MoE routing and sampler names (_NOT_INDEXER_TOPK), so topk_softmax is MoE routing
#:     even though MoE / MLP comes later; torch's own top-k (gatherTopK) counts as the indexer's.
#:   QSA indexer, QSA attention, GDN, norm / hyper-connection and PLE lookup before MoE / MLP: MoE /
#:     MLP holds every generic GEMM (gemm, cutlass, nvjet, cublas, matmul), and a family's own GEMM
#:     that carries its family's name ("indexer_gemm", "fused_hc_down_silu") stays with its family.
#:     A GEMM without such a name cannot be told: attention, GDN and LM-head projections are MoE / MLP.
#:   PLE lookup after the indexer: "gather" would otherwise take torch's gatherTopK.
#:   MoE / MLP before sampler: topk_softmax and count_and_sort_expert_tokens are routing, not sampling.
#:   sampler before elementwise: torch's argmax is a reduce_kernel naming ArgMaxOps.
#: MTP draft kernels have no name of their own: a draft layer's kernels fall under their kind.
#: memcpy and memset never match a name (classify takes them from the category); they sit here for
#: the table's order. The patterns are first guesses, to be refined against real traces.
FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("KV write", _rx(r"reshape_and_cache|concat_and_cache|kv_?write|write_?kv|(?<!de)quant\w*cache|cache_kernel")),
    ("QSA indexer", _rx(rf"indexer|cooperative_?top_?k|compress|^(?!.*(?:{_NOT_INDEXER_TOPK})).*top_?k")),
    ("QSA attention", _rx(r"qsa|sparse_?attn|sparse_?attention|(?:attn|attention).*(?:int8|fp8)"
                          r"|paged\w*attention|unified_attention|reduce_segments")),
    ("GDN", _rx(r"gated_delta|delta_rule|gdn|(?<![a-z0-9])fla_|chunk_\w*fwd|fused_recurrent|conv1d"
                r"|solve_tril|recompute_w_u|scaled_dot_kkt|chunk_local_cumsum|l2norm")),
    ("norm / hyper-connection", _rx(r"rms_?norm|layer_?norm|hyper_?conn|(?<![a-z0-9])hc_|sinkhorn")),
    ("PLE lookup", _rx(r"(?<![a-z0-9])ple(?![a-z0-9])|engram|embedding_?bag"
                       r"|^(?!.*(?:moe|expert)).*(?:index_?select|gather)")),
    ("MoE / MLP", _rx(r"moe|expert|top_?k_?(?:softmax|sigmoid)|topk_?gating|silu|act_and_mul"
                      r"|gemm|gemv|cutlass|xmma|nvjet|cublas|matmul|splitk_?reduce")),
    ("sampler", _rx(r"sampl|argmax|softmax|sort|multinomial|gumbel")),
    ("memcpy", _NEVER),
    ("memset", _NEVER),
    ("elementwise", _rx(r"elementwise|reduce_kernel|(?<!pre)fill")),
)
OTHER = "other"


@dataclass(frozen=True)
class StepKind:
    """One engine step as the GPU saw it: the requests it ran and whether it prefilled.

    A step that prefills while others decode hands a token to each of them: `gen_requests` counts all
    but one request there (the runner does not say how many prefill at once; one is the common case).
    """

    requests: int
    prefill: bool

    @property
    def gen_requests(self) -> int:
        return max(self.requests - 1, 0) if self.prefill else self.requests

    @property
    def kind(self) -> str:
        """prefill, mixed, decode or empty: how a trace without usable decode steps is described."""
        if self.prefill:
            return "mixed" if self.requests > 1 else "prefill"
        return "decode" if self.requests else "empty"


@dataclass(frozen=True)
class Breakdown:
    """Means over the measured decode steps, in microseconds per step.

    `overlap_us` is what the kernel sums count twice (kernels running at once on several streams):
    sum of kernels' us_per_step = gpu_busy_us + overlap_us, and step_us = gpu_busy_us + idle_us.
    `categories` holds the event category of the names that are not "kernel" events (memcpy, memset),
    which classify needs. `idle_after` splits idle_us by the GPU work each idle gap follows (after_label):
    a stream held by a CUDA host function idles after the copy that feeds it ("memcpy DtoH").
    The host side, from the CUDA calls the trace records with their launches: `host_step_us` the mean
    time between the host's launches of successive steps' STEP_KERNEL, `host_calls` each CUDA call's
    calls and us per step, `host_before` the host's time between one launch and the next, by what the
    next one launches (a kernel's family, or "graph" for a CUDA graph): where the host spends a step.
    `host_sequence` is the commonest step's CUDA calls in order, each as "call" or "call > what it
    launched" (kernel names cut to SEQUENCE_NAME_CHARS), and `host_sequence_share` the share of steps
    that made exactly it: two arms whose sequences are equal do the same host work per step.
    """

    steps: int
    gen_requests: int
    step_us: float
    step_us_median: float
    gpu_busy_us: float
    idle_us: float
    overlap_us: float
    kernels: dict[str, dict[str, float]]
    categories: dict[str, str] = field(default_factory=dict)
    idle_after: dict[str, float] = field(default_factory=dict)
    host_step_us: float | None = None
    host_calls: dict[str, dict[str, float]] = field(default_factory=dict)
    host_before: dict[str, float] = field(default_factory=dict)
    host_sequence: list[str] = field(default_factory=list)
    host_sequence_share: float | None = None


def load_trace(path: Path) -> list[dict]:
    """The trace's events; a gzip file is read by its magic bytes, whatever its suffix."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, EOFError, ValueError) as e:  # corrupt or cut gzip, not JSON, not UTF-8
        raise ValueError(f"{path}: not a Chrome trace ({type(e).__name__}: {e})") from e
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return [e for e in events if isinstance(e, dict)]


def _span(event: dict) -> tuple[float, float] | None:
    """(start, end) of a complete event; None for flow, metadata and other events without a duration."""
    ts, dur = event.get("ts"), event.get("dur")
    if event.get("ph") != "X" or not _number(ts) or not _number(dur):
        return None
    return float(ts), float(ts) + float(dur)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _union(spans: list[tuple[float, float]], labels: list[str]) -> tuple[list[float], list[float], list[str]]:
    """Sorted spans merged into disjoint ones (starts, ends), both increasing, for bisecting, and the
    label of the span that ends each merged one."""
    starts: list[float] = []
    ends: list[float] = []
    last: list[str] = []
    for (a, b), label in zip(spans, labels):
        if starts and a <= ends[-1]:
            if b >= ends[-1]:
                ends[-1], last[-1] = b, label
        else:
            starts.append(a)
            ends.append(b)
            last.append(label)
    return starts, ends, last


def after_label(name: str, cat: str) -> str:
    """What an idle gap follows: a copy by its direction ("memcpy DtoH"), anything else by its family."""
    if cat == "gpu_memcpy":
        m = re.match(r"Memcpy (\w+)", name)
        return f"memcpy {m.group(1)}" if m else "memcpy"
    return classify(name, cat=cat)


def _covered(starts: list[float], ends: list[float], lo: float, hi: float) -> float:
    """Length of the disjoint spans' part inside [lo, hi)."""
    total = 0.0
    j = bisect.bisect_right(ends, lo)
    while j < len(starts) and starts[j] < hi:
        total += min(ends[j], hi) - max(starts[j], lo)
        j += 1
    return total


def _grid_x(event: dict) -> int | None:
    grid = (event.get("args") or {}).get("grid")
    return int(grid[0]) if isinstance(grid, list) and grid and _number(grid[0]) else None


@dataclass(frozen=True)
class _Step:
    start: float  # the step kernel's start on the GPU
    kind: StepKind
    correlation: object  # ties the step kernel to the host call that launched it


def _steps(events: list[dict]) -> list[_Step]:
    """The trace's steps in order: one per STEP_KERNEL, with the requests its grid says, prefilling
    where a PREFILL_KERNEL starts before the next step does."""
    marks = sorted((span[0], e) for e in events if e.get("cat") == "kernel" and e.get("name") == STEP_KERNEL
                   and (span := _span(e)) and (_grid_x(e) or 0) > 0)
    prefills = sorted(span[0] for e in events if e.get("cat") == "kernel" and e.get("name") == PREFILL_KERNEL
                      and (span := _span(e)))
    out = []
    for i, (ts, e) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else float("inf")
        j = bisect.bisect_left(prefills, ts)
        out.append(_Step(ts, StepKind(requests=_grid_x(e) - 1, prefill=j < len(prefills) and prefills[j] < end),
                         (e.get("args") or {}).get("correlation")))
    return out


def token_periods(events: list[dict]) -> dict:
    """What a client's inter-token latencies are made of: every step with requests in decode (pure or
    mixed with a prefill chunk) hands each of its gen_requests one token, one step period after the
    last. The median of the periods weighted so is what the benchmark's median ITL measures, and the
    counts say which kind of step the tokens came from (at 32K x c16 most come from mixed steps)."""
    steps = _steps(events)
    weighted: list[tuple[float, int]] = []
    tokens = {"decode": 0, "mixed": 0}
    for s, nxt in zip(steps, steps[1:]):
        if s.kind.gen_requests and s.kind.kind in tokens:
            weighted.append((nxt.start - s.start, s.kind.gen_requests))
            tokens[s.kind.kind] += s.kind.gen_requests
    out: dict = {"steps": {kind: sum(1 for s in steps if s.kind.kind == kind) for kind in ("prefill", "mixed", "decode")},
                 "tokens": tokens, "median_period_us": None}
    if weighted:
        weighted.sort()
        half, seen = sum(w for _, w in weighted) / 2, 0
        for period, w in weighted:
            seen += w
            if seen >= half:
                out["median_period_us"] = round(period, 3)
                break
    return out


def decode_breakdown(events: list[dict], *, gen_requests: int | None = None, skip_first: int = 2,
                     kind: str = "decode") -> Breakdown:
    """GPU time per kernel, GPU busy and idle time, averaged over the trace's pure-decode steps (or,
    with kind="mixed", its steps that run a prefill chunk beside decoding requests), and the host's
    CUDA calls over the same steps.

    A step's window ends where the next step of any kind starts, so a prefill or mixed step ends the
    decode step before it; the last step has no known end and is dropped. The first `skip_first`
    decode steps are warm-up after prefill. A kernel's time is clipped to each window it overlaps (so
    busy never exceeds wall); its call counts in the window holding its start.
    """
    steps = _steps(events)
    selected = [i for i, s in enumerate(steps)
                if s.kind.kind == kind and (gen_requests is None or s.kind.gen_requests == gen_requests)]
    used = [i for i in selected if i + 1 < len(steps)][skip_first:]
    if not used:
        raise ValueError(_nothing_to_measure(events, steps, selected, gen_requests=gen_requests, skip_first=skip_first))
    lo = [steps[i].start for i in used]
    hi = [steps[i + 1].start for i in used]

    gpu = sorted((span, str(e.get("name", "?")), e["cat"]) for e in events
                 if e.get("cat") in GPU_CATEGORIES and (span := _span(e)) and span[1] > span[0])
    busy_starts, busy_ends, busy_last = _union([span for span, _, _ in gpu], [after_label(n, c) for _, n, c in gpu])
    us: dict[str, float] = {}
    calls: dict[str, int] = {}
    categories: dict[str, str] = {}
    for (a, b), name, cat in gpu:
        home = bisect.bisect_right(lo, a) - 1
        started_inside = home >= 0 and a < hi[home]
        j = bisect.bisect_right(hi, a)
        if not started_inside and (j == len(lo) or lo[j] >= b):
            continue
        us[name] = us.get(name, 0.0)
        calls[name] = calls.get(name, 0) + started_inside
        while j < len(lo) and lo[j] < b:
            us[name] += min(b, hi[j]) - max(a, lo[j])
            j += 1
        if cat != "kernel":
            categories[name] = cat

    n = len(used)
    walls = [b - a for a, b in zip(lo, hi)]
    busy = sum(_covered(busy_starts, busy_ends, a, b) for a, b in zip(lo, hi)) / n
    kernels = {name: {"us_per_step": us[name] / n, "calls_per_step": calls[name] / n}
               for name in sorted(us, key=lambda k: (-us[k], k))}
    counts: dict[int, int] = {}
    for i in used:
        counts[steps[i].kind.gen_requests] = counts.get(steps[i].kind.gen_requests, 0) + 1
    step_us = sum(walls) / n
    host = _host_side(events, steps, used)
    return Breakdown(steps=n, gen_requests=max(counts, key=lambda g: (counts[g], g)), step_us=step_us,
                     step_us_median=statistics.median(walls), gpu_busy_us=busy, idle_us=step_us - busy,
                     overlap_us=sum(us.values()) / n - busy, kernels=kernels, categories=categories,
                     idle_after=_idle_after(busy_starts, busy_ends, busy_last, lo, hi, n), **host)


def _host_side(events: list[dict], steps: list[_Step], used: list[int]) -> dict:
    """host_step_us, host_calls and host_before (see Breakdown) over the steps `used`, whose host
    windows run from the call launching their step kernel to the call launching the next one's.
    Empty where the trace holds no host calls tied to the step kernels (a trace without CUDA calls)."""
    calls = sorted((span, e) for e in events if e.get("cat") in HOST_CATEGORIES and (span := _span(e)))
    by_corr = {(e.get("args") or {}).get("correlation"): span for span, e in calls}
    windows = []
    for i in used:
        a, b = by_corr.get(steps[i].correlation), by_corr.get(steps[i + 1].correlation)
        if steps[i].correlation is not None and a and b and b[0] > a[0]:
            windows.append((a[0], b[0]))
    if not windows:
        return {}
    launched: dict[object, str] = {}  # correlation -> what the call launched
    first: dict[object, str] = {}  # correlation -> the first GPU event's name
    for e in events:
        if e.get("cat") in GPU_CATEGORIES and (corr := (e.get("args") or {}).get("correlation")) is not None:
            launched.setdefault(corr, after_label(str(e.get("name", "?")), e["cat"]))
            first.setdefault(corr, str(e.get("name", "?"))[:SEQUENCE_NAME_CHARS])
    sequences: Counter[tuple[str, ...]] = Counter()
    starts = [span[0] for span, _ in calls]
    per_call: dict[str, list[float]] = {}
    before: dict[str, float] = {}
    for lo, hi in windows:
        cursor = lo
        sequence = []
        for k in range(bisect.bisect_left(starts, lo), bisect.bisect_left(starts, hi)):
            (a, b), e = calls[k]
            name = str(e.get("name", "?"))
            what_gpu = first.get((e.get("args") or {}).get("correlation"))
            sequence.append(f"{name} > {what_gpu}" if what_gpu else name)
            entry = per_call.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += b - a
            if LAUNCH_CALL.match(name):
                what = "graph" if "graphlaunch" in name.lower() else launched.get(
                    (e.get("args") or {}).get("correlation"), OTHER)
                before[what] = before.get(what, 0.0) + max(a - cursor, 0.0)
                cursor = max(cursor, b)
        before["after the last launch"] = before.get("after the last launch", 0.0) + max(hi - cursor, 0.0)
        sequences[tuple(sequence)] += 1
    n = len(windows)
    common, count = sequences.most_common(1)[0]
    return {"host_step_us": sum(b - a for a, b in windows) / n,
            "host_calls": {name: {"calls_per_step": c / n, "us_per_step": t / n}
                           for name, (c, t) in sorted(per_call.items(), key=lambda kv: -kv[1][1])},
            "host_before": {k: v / n for k, v in sorted(before.items(), key=lambda kv: -kv[1])},
            "host_sequence": list(common), "host_sequence_share": count / n}


def _idle_after(starts: list[float], ends: list[float], last: list[str], lo: list[float], hi: list[float],
                n: int) -> dict[str, float]:
    """Idle us per step inside the windows [lo, hi), by the label of the busy span before each gap
    ("start" where no GPU work came before), longest first."""
    out: dict[str, float] = {}
    for a, b in zip(lo, hi):
        j = bisect.bisect_right(ends, a)  # the first busy span ending after a
        cursor = a
        while cursor < b:
            if j < len(starts) and starts[j] <= cursor:  # busy: on to the span's end
                cursor = ends[j]
                j += 1
                continue
            gap_end = min(b, starts[j]) if j < len(starts) else b
            label = last[j - 1] if j > 0 else "start"
            out[label] = out.get(label, 0.0) + gap_end - cursor
            cursor = gap_end
    return {label: us / n for label, us in sorted(out.items(), key=lambda kv: -kv[1])}


def _nothing_to_measure(events: list[dict], steps: list[_Step], selected: list[int], *,
                        gen_requests: int | None, skip_first: int) -> str:
    """Why no decode step is left, from what the trace holds: the caller learns if profiling missed decode."""
    kinds = {"prefill": 0, "mixed": 0, "decode": 0, "empty": 0}
    by_g: dict[int, int] = {}
    for s in steps:
        kinds[s.kind.kind] += 1
        if s.kind.kind == "decode":
            by_g[s.kind.gen_requests] = by_g.get(s.kind.gen_requests, 0) + 1
    found = ", ".join(f"{kind} {count}" for kind, count in kinds.items())
    msg = f"no step of the kind asked for: {len(steps)} steps by {STEP_KERNEL} ({found})"
    if by_g:
        msg += "; decode steps by gen_requests: " + ", ".join(f"{g}: {c}" for g, c in sorted(by_g.items()))
    if gen_requests is not None:
        msg += f"; {len(selected)} with gen_requests={gen_requests}"
    if selected and selected[-1] == len(steps) - 1:
        msg += "; the last one has no following step, so no known end"
    if selected:
        msg += f"; skip_first={skip_first} drops the first {skip_first} as warm-up"
    if not steps and any(e.get("cat") == "user_annotation" for e in events):
        msg += "; the trace has CPU annotations but no step kernel: a vLLM other than 0.33's GPU model runner?"
    return msg


def classify(name: str, *, cat: str = "kernel") -> str:
    """The kernel's family: by category for copies and fills, else the first FAMILIES pattern found in its name."""
    if cat in _BY_CATEGORY:
        return _BY_CATEGORY[cat]
    return next((family for family, pattern in FAMILIES if pattern.search(name)), OTHER)


def family_table(b: Breakdown) -> dict[str, float]:
    """us per step per family in FAMILIES order, then the GPU's wait on the host: with no overlap it sums to step_us."""
    per: dict[str, float] = {}
    for name, k in b.kernels.items():
        family = classify(name, cat=b.categories.get(name, "kernel"))
        per[family] = per.get(family, 0.0) + k["us_per_step"]
    table = {family: per[family] for family in [f for f, _ in FAMILIES] + [OTHER] if per.get(family)}
    table[IDLE_ROW] = b.idle_us
    return table


def summarize(path: Path, *, gen_requests: int | None = None) -> dict:
    """One trace as a small JSON-able dict for the GPU host's results: `decode` (the pure-decode steps
    with gen_requests requests) and `mixed` (prefill chunk + decode) breakdowns, each with its top
    SUMMARY_KERNELS kernels, the rest summed, and the family table over all of them (or the reason
    there is none), and `tokens` (token_periods). A file that is not a trace raises ValueError."""
    path = Path(path)
    events = load_trace(path)
    out: dict = {"trace": path.name, "tokens": token_periods(events)}
    for kind, want, skip in (("decode", gen_requests, 2), ("mixed", None, 0)):
        try:
            out[kind] = _summary(decode_breakdown(events, gen_requests=want, skip_first=skip, kind=kind))
        except ValueError as e:
            out[kind] = {"error": str(e)}
    return out


def _summary(b: Breakdown) -> dict:
    ranked = list(b.kernels.items())  # already by time, longest first
    kernels = {name: {k: round(v, 3) for k, v in entry.items()} for name, entry in ranked[:SUMMARY_KERNELS]}
    rest = ranked[SUMMARY_KERNELS:]
    if rest:
        kernels[f"({len(rest)} other kernels)"] = {
            "us_per_step": round(sum(e["us_per_step"] for _, e in rest), 3),
            "calls_per_step": round(sum(e["calls_per_step"] for _, e in rest), 3),
        }
    out = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(b).items()}
    out["kernels"] = kernels
    out["idle_after"] = {label: round(us, 3) for label, us in b.idle_after.items()}
    out["families"] = {family: round(us, 3) for family, us in family_table(b).items()}
    out["host_calls"] = {name: {k: round(v, 3) for k, v in entry.items()} for name, entry in b.host_calls.items()}
    out["host_before"] = {what: round(us, 3) for what, us in b.host_before.items()}
    if b.host_sequence_share is not None:
        out["host_sequence_share"] = round(b.host_sequence_share, 3)
    return out
