"""Where a decode step's time goes, read from the PyTorch profiler trace a vLLM server writes on
/stop_profile: the benchmark measures a step's wall time; this splits it into GPU time per kernel
and per kernel family, plus the time the GPU waits on the host.

Steps are the worker's host-side annotations `execute_context_{C}(T_ctx)_generation_{G}(T_gen)`, one
per engine step. A pure-decode step's window runs from its start to the next step's start, so it
holds the step's whole period in the engine loop, host overhead included. GPU work is every kernel,
memcpy and memset event on any stream (a CUDA graph replay shows its kernels one by one).

Standard library only: it runs on the GPU host before the harness's wheels are installed.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The largest relative gap between the profiled step and the benchmark's measured step for the
#: breakdown to describe the steps that were measured.
ACCOUNTING_LIMIT = 0.10
#: Kernel names kept by `summarize`; the rest are summed into one entry, so results stay small.
SUMMARY_KERNELS = 60
#: The family_table row for the part of a step the GPU spends waiting on the host.
IDLE_ROW = "GPU idle (host)"

STEP_NAME = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
#: Host-side spans only: the same names under "gpu_user_annotation" are GPU-side copies, not steps.
STEP_CATEGORY = "user_annotation"
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: Copies and fills are told by the event's category: their names ("Memcpy DtoD ...") say nothing more.
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
    """One engine step as its annotation names it: requests and tokens in prefill and in decode."""

    ctx_requests: int
    ctx_tokens: int
    gen_requests: int
    gen_tokens: int

    @property
    def kind(self) -> str:
        """prefill, mixed, decode or empty: how a trace without usable decode steps is described."""
        if self.ctx_requests:
            return "mixed" if self.gen_requests else "prefill"
        return "decode" if self.gen_requests else "empty"


@dataclass(frozen=True)
class Breakdown:
    """Means over the measured decode steps, in microseconds per step.

    `overlap_us` is what the kernel sums count twice (kernels running at once on several streams):
    sum of kernels' us_per_step = gpu_busy_us + overlap_us, and step_us = gpu_busy_us + idle_us.
    `categories` holds the event category of the names that are not "kernel" events (memcpy, memset),
    which classify needs. `idle_after` splits idle_us by the GPU work each idle gap follows (after_label):
    a stream held by a CUDA host function idles after the copy that feeds it ("memcpy DtoH").
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


def parse_step(name: str) -> StepKind | None:
    """The step an execute_model annotation names; None for any other name."""
    m = STEP_NAME.fullmatch(name) if isinstance(name, str) else None
    return StepKind(*map(int, m.groups())) if m else None


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


def _steps(events: list[dict]) -> list[tuple[float, StepKind]]:
    return sorted(((span[0], kind) for e in events if e.get("cat") == STEP_CATEGORY
                   and (span := _span(e)) and (kind := parse_step(e.get("name")))), key=lambda s: s[0])


def token_periods(events: list[dict]) -> dict:
    """What a client's inter-token latencies are made of: every step with requests in decode (pure or
    mixed with a prefill chunk) hands each of its gen_requests one token, one step period after the
    last. The median of the periods weighted so is what the benchmark's median ITL measures, and the
    counts say which kind of step the tokens came from (at 32K x c16 most come from mixed steps)."""
    steps = _steps(events)
    weighted: list[tuple[float, int]] = []
    tokens = {"decode": 0, "mixed": 0}
    for (a, k), (b, _) in zip(steps, steps[1:]):
        if k.gen_requests:
            weighted.append((b - a, k.gen_requests))
            tokens[k.kind] += k.gen_requests
    out: dict = {"steps": {kind: sum(1 for _, k in steps if k.kind == kind) for kind in ("prefill", "mixed", "decode")},
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
    with kind="mixed", its steps that run a prefill chunk beside decoding requests).

    A step's window ends where the next step of any kind starts, so a prefill or mixed step ends the
    decode step before it; the last step has no known end and is dropped. The first `skip_first`
    decode steps are warm-up after prefill. A kernel's time is clipped to each window it overlaps (so
    busy never exceeds wall); its call counts in the window holding its start.
    """
    steps = _steps(events)
    selected = [i for i, (_, k) in enumerate(steps)
                if k.kind == kind and (gen_requests is None or k.gen_requests == gen_requests)]
    used = [i for i in selected if i + 1 < len(steps)][skip_first:]
    if not used:
        raise ValueError(_nothing_to_measure(events, steps, selected, gen_requests=gen_requests, skip_first=skip_first))
    lo = [steps[i][0] for i in used]
    hi = [steps[i + 1][0] for i in used]

    gpu = sorted((span, str(e.get("name", "?")), e["cat"]) for e in events
                 if e.get("cat") in GPU_CATEGORIES and (span := _span(e)))
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
        counts[steps[i][1].gen_requests] = counts.get(steps[i][1].gen_requests, 0) + 1
    step_us = sum(walls) / n
    return Breakdown(steps=n, gen_requests=max(counts, key=lambda g: (counts[g], g)), step_us=step_us,
                     step_us_median=statistics.median(walls), gpu_busy_us=busy, idle_us=step_us - busy,
                     overlap_us=sum(us.values()) / n - busy, kernels=kernels, categories=categories,
                     idle_after=_idle_after(busy_starts, busy_ends, busy_last, lo, hi, n))


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


def _nothing_to_measure(events: list[dict], steps: list[tuple[float, StepKind]], selected: list[int], *,
                        gen_requests: int | None, skip_first: int) -> str:
    """Why no decode step is left, from what the trace holds: the caller learns if profiling missed decode."""
    kinds = {"prefill": 0, "mixed": 0, "decode": 0, "empty": 0}
    by_g: dict[int, int] = {}
    for _, k in steps:
        kinds[k.kind] += 1
        if k.kind == "decode":
            by_g[k.gen_requests] = by_g.get(k.gen_requests, 0) + 1
    gpu_side = sum(1 for e in events if e.get("cat") == "gpu_user_annotation" and parse_step(e.get("name")))
    found = ", ".join(f"{kind} {count}" for kind, count in kinds.items())
    msg = f"no step of the kind asked for: {len(steps)} step annotations ({found})"
    if by_g:
        msg += "; decode steps by gen_requests: " + ", ".join(f"{g}: {c}" for g, c in sorted(by_g.items()))
    if gen_requests is not None:
        msg += f"; {len(selected)} with gen_requests={gen_requests}"
    if selected and selected[-1] == len(steps) - 1:
        msg += "; the last one has no following step, so no known end"
    if selected:
        msg += f"; skip_first={skip_first} drops the first {skip_first} as warm-up"
    if gpu_side:
        msg += f"; {gpu_side} gpu_user_annotation spans (GPU side, not steps)"
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
    return out
