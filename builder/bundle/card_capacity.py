"""The model card's "What it buys you": what each KV dtype costs and holds, then what was measured.

Computed rows come from builder.plan (bytes per token per GPU, pool, sessions at max_model_len);
measured rows only from evidence files: kv_pool gate files of the target, the H200
kernel-level speed and accuracy files of evidence/kernels/, and the engine A/B of evidence/engine-ab/,
each naming its file.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.bundle.engine_evidence import (
    AB_RATIOS,
    HIGHER_IS_BETTER,
    MIN_VERDICT_REPEATS,
    EngineAB,
    EngineFidelityCheck,
    EnginePoolCheck,
    RatioEstimate,
    verdict_of,
)
from builder.constants import (
    ENGINE_AB_EVIDENCE,
    ENGINE_AB_FILE,
    ENGINE_EVIDENCE,
    ENGINE_FIDELITY_FILE,
    ENGINE_POOLS_FILE,
)
from builder.errors import RenderError
from builder.measure.evidence import GateEvidence
from builder.plan.budget import GIB
from builder.plan.compare import HostsComparison
from builder.plan.models import CapacityPlan

#: The kernel grid per selection pattern, the engine's first (benchmarks.kernels.grid --selection):
#: what the indexer hands the kernel, then uniform random tokens (a synthetic stress without runs).
KERNEL_SPEED_FILES = (("engine", "qsa-grid-engine-h200.json"), ("uniform", "qsa-grid-h200.json"))
KERNEL_ACCURACY_FILE = "qsa-int8-accuracy.json"
#: The three KV dtypes the kernel evidence compares, as its arms name them.
KERNEL_ARMS = ("bf16", "fp8", "int8")
BASELINE_DTYPES = ("bfloat16", "auto")
#: The engine A/B table's columns: (ratio key of ABCell.ratios, metric, header), TPOT before TTFT.
AB_COLUMNS = tuple((f"{a}/{b}", metric, f"{a}/{b} {name}")
                   for metric, name in (("median_tpot_ms", "TPOT"), ("median_ttft_ms", "TTFT")) for a, b in AB_RATIOS)
ENGINE_REPORT_COMMAND = "python -m benchmarks.engine.report --run NAME=SUMMARY --out DIR"
ENGINE_AB_COMMAND = f"python -m benchmarks.engine.ab_report --run NAME=SUMMARY --out evidence/{ENGINE_AB_EVIDENCE}"


class CapacityRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    kv_cache_dtype: str
    stored_as: str
    configured: bool
    bytes_per_token_layer: str
    bytes_per_token_all: str
    pool: str
    sessions: str
    vs_baseline: str
    source: str


class KernelSpeedRow(BaseModel):
    """One row shape of the grid: int8's speed-up ranges over the points where the goal applies."""

    model_config = ConfigDict(frozen=True)
    selections: str
    rows: str
    points: str
    int8_vs_fp8: str
    int8_vs_bf16: str
    goal_met: str


class AccuracyRow(BaseModel):
    """One input: the worst relative RMS error over every width, per cache."""

    model_config = ConfigDict(frozen=True)
    input: str
    widths: str
    kernel: dict[str, str]
    total: dict[str, str]


class EngineABRow(BaseModel):
    """One cell of the A/B grid: int8's ratio to each other arm, per AB_COLUMNS."""

    model_config = ConfigDict(frozen=True)
    cell: str
    ratios: list[str]


class EngineABTable(BaseModel):
    """The engine A/B as the card shows it; text from the file is escaped by the template."""

    model_config = ConfigDict(frozen=True)
    source: str
    label: str
    hardware: str
    run: str
    mtp: str
    order: str
    repeats: str
    headers: list[str]
    rows: list[EngineABRow]
    #: "host in 5 of 6, ..." over the profiled decode steps; "" when the file has none.
    bound: str = ""
    #: How far a second run's median TPOT was from this run's; "" when none was compared.
    agreement: str = ""
    #: Fewer repeats than this on either arm get no verdict (engine_evidence.verdict_of).
    min_repeats: int = MIN_VERDICT_REPEATS


class CapacitySection(BaseModel):
    """Everything the card's first section shows; numbers already formatted."""

    model_config = ConfigDict(frozen=True)
    computed: bool
    error: str | None = None
    heading: str = ""
    method: str = ""
    scope: str = "per GPU"
    layers: int = 0
    baseline: str = ""
    rows: list[CapacityRow] = []
    budget: str = ""
    budget_terms: list[str] = []
    budget_exact: bool = True
    notes: list[str] = []
    #: Against cluster.single_host: what the extra hosts buy, per KV dtype.
    hosts: HostsComparison | None = None
    kernel_speed_sources: list[str] = []
    kernel_speed_triton: str = ""  # the Triton the grids ran under: int8's speed depends on it
    kernel_speed: list[KernelSpeedRow] = []
    #: Per selection pattern, the points outside the goal's scope where int8 is slower than bf16.
    kernel_speed_below_bf16: list[str] = []
    accuracy_source: str | None = None
    accuracy_metric: str = ""
    accuracy: list[AccuracyRow] = []
    engine_ab: EngineABTable | None = None

    @property
    def hosts_rows(self) -> list[dict[str, str]]:
        """The comparison's rows, formatted for the card."""
        return [{"dtype": r.kv_cache_dtype, "configured": r.configured, "pool_one": f"{r.pool_tokens[0]:,}",
                 "pool_this": f"{r.pool_tokens[1]:,}", "ratio": f"{r.pool_ratio:.2f}x" if r.pool_ratio else "-",
                 "sessions_one": f"{r.sessions[0]:,}", "sessions_this": f"{r.sessions[1]:,}"}
                for r in (self.hosts.rows if self.hosts else [])]


def _n(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RenderError(f"{path}: not valid JSON: {exc}", hint="re-run what wrote it, or remove the file") from exc
    if not isinstance(data, dict):
        raise RenderError(f"{path}: must hold a JSON object", hint="re-run what wrote it")
    return data


def measured_pools(evidence_dir: Path) -> list[tuple[str, int, float | None, str]]:
    """(KV dtype, pool tokens, concurrency, bundle path) of every kv_pool gate file of the target."""
    out = []
    for path in sorted(evidence_dir.rglob("kv_pool.json")) if evidence_dir.is_dir() else []:
        try:
            ev = GateEvidence.model_validate(_read_json(path))
        except ValidationError as exc:
            raise RenderError(f"{path}: not a gate evidence file: {exc}", hint="re-run `builder gates`") from exc
        tokens = ev.observed.get("kv_pool_tokens")
        info = ev.observed.get("cache_config_info") or {}
        dtype = info.get("cache_dtype") or (ev.server.kv_cache_dtype if ev.server else None)
        if not isinstance(tokens, int) or not dtype:
            continue
        conc = info.get("kv_cache_max_concurrency")
        out.append((dtype, tokens, float(conc) if conc not in (None, "None") else None,
                    f"evidence/{path.relative_to(evidence_dir).as_posix()}"))
    return out


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def kernel_speed(kernels_dir: Path) -> tuple[list[str], str, list[KernelSpeedRow], list[str]]:
    """(sources, Triton versions, rows, below-bf16 notes): int8 vs fp8 and bf16 per row shape of
    the engine grid, over the points the goal covers, for each selection pattern measured; and,
    per pattern, the points below the goal's scope where int8 is slower than bf16.

    Ranges, not a chosen case: the grid is where the engine goes, and the card must show where
    int8 is not ahead as plainly as where it is (CUDA-graph time, as vLLM runs decode).
    """
    sources, tritons, rows, below = [], [], [], []
    for selections, name in KERNEL_SPEED_FILES:
        path = kernels_dir / name
        if path.is_file():
            data = _read_json(path)
            sources.append(f"evidence/kernels/{name}")
            triton = str((data.get("versions") or {}).get("triton") or "unrecorded")
            tritons += [triton] if triton not in tritons else []
            rows += _speed_rows(selections, data)
            below += _below_bf16(selections, data)
    return sources, " and ".join(tritons), rows, below


def _below_bf16(selections: str, data: dict) -> list[str]:
    """'<selections>: N of M points (labels), X-Yx bf16's speed' for the out-of-scope points int8 loses."""
    small = [p for p in data.get("points", []) if isinstance(p, dict) and not p.get("goal_in_scope")]
    slower = [p for p in small if p["int8_speedup_over_bf16"]["graph"] < 1.0]
    if not slower:
        return []
    labels = ", ".join(dict.fromkeys(str(p.get("rows_label")) for p in slower))
    return [f"{selections}: {len(slower)} of {len(small)} points ({labels}), "
            f"{_span([p['int8_speedup_over_bf16']['graph'] for p in slower])} bf16's speed"]


def _speed_rows(selections: str, data: dict) -> list[KernelSpeedRow]:
    groups: dict[str, list[dict]] = {}
    for point in data.get("points", []):
        if isinstance(point, dict) and point.get("goal_in_scope"):
            groups.setdefault(str(point.get("rows_label")), []).append(point)
    rows = []
    for label, points in groups.items():
        fp8 = [p["int8_speedup_over_fp8"]["graph"] for p in points]
        bf16 = [p["int8_speedup_over_bf16"]["graph"] for p in points]
        contexts = sorted({p["context"] for p in points})
        rows.append(KernelSpeedRow(
            selections=selections, rows=label,
            points=f"{len(points)} (context {_tokens(contexts[0])}-{_tokens(contexts[-1])})",
            int8_vs_fp8=_span(fp8), int8_vs_bf16=_span(bf16),
            goal_met=f"{sum(bool(p.get('goal_met')) for p in points)} of {len(points)}",
        ))
    return rows


def kernel_accuracy(kernels_dir: Path) -> tuple[str | None, str, list[AccuracyRow]]:
    path = kernels_dir / KERNEL_ACCURACY_FILE
    if not path.is_file():
        return None, "", []
    data = _read_json(path)
    rows = []
    for name, result in data.get("inputs", {}).items():
        widths = result.get("widths", {}) if isinstance(result, dict) else {}
        errors = [arms for arms in widths.values() if all(isinstance(arms.get(a), dict) for a in KERNEL_ARMS)]
        if not errors:
            continue
        worst = {kind: {a: max(e[a][kind] for e in errors) for a in KERNEL_ARMS} for kind in ("kernel", "total")}
        rows.append(AccuracyRow(
            input=name, widths=f"{min(map(int, widths))}-{max(map(int, widths))}",
            kernel={a: f"{v:.2g}" for a, v in worst["kernel"].items()},
            total={a: f"{v:.2g}" for a, v in worst["total"].items()},
        ))
    return f"evidence/kernels/{KERNEL_ACCURACY_FILE}", str(data.get("metric", "")), rows


def _engine_check(path: Path, model, what: str, command: str = ENGINE_REPORT_COMMAND):
    """The engine evidence file as `model`; None when there is none."""
    if not path.is_file():
        return None
    try:
        return model.model_validate(_read_json(path))
    except ValidationError as exc:
        raise RenderError(f"{path}: not an engine {what}: {exc}", hint=f"regenerate it: {command}") from exc


def engine_pool_note(path: Path) -> str | None:
    """One line: how close vLLM's own pools came to this planner's in the engine run, and the
    int8 ratios it measured; None when there is no such run."""
    check = _engine_check(path, EnginePoolCheck, "pool check")
    if check is None:
        return None
    worst = max(abs(a.measured_tokens / a.planned_tokens - 1) for a in check.arms.values())
    by = {a.kv_cache_dtype: a.measured_tokens for a in check.arms.values()}
    int8 = by.get("int8_per_token_head")
    ratios = [f"{int8 / by[d]:.2f}x {name}'s" for d, name in (("auto", "bf16"), ("fp8", "fp8")) if int8 and d in by]
    held = f"; int8 held {' and '.join(ratios)} tokens" if ratios else ""
    names = sorted("bf16" if d == "auto" else d for d in by)
    return (f"Checked in the {check.label}, {check.kv_bytes / GIB:,.0f} GiB of KV per server, {check.run}: "
            f"vLLM's own pools for {', '.join(names)} were within {worst:.2%} of this planner's{held} "
            f"(evidence/{ENGINE_EVIDENCE}/{ENGINE_POOLS_FILE} in the qfn-int8kv repository).")


def engine_fidelity_note(path: Path) -> str | None:
    """One line: int8's and fp8's next-token KL to bf16 KV in the engine run, beside bf16 against
    itself; None when there is no such run."""
    check = _engine_check(path, EngineFidelityCheck, "fidelity check")
    if check is None:
        return None
    named = {"int8_per_token_head": "int8", "fp8": "fp8", "auto": "bf16 against itself"}
    order = {dtype: i for i, dtype in enumerate(named)}
    arms = sorted(check.arms.values(), key=lambda a: order.get(a.kv_cache_dtype, len(order)))
    kl = ", ".join(f"{named.get(a.kv_cache_dtype, a.kv_cache_dtype)} {a.mean_kl:.1e}" for a in arms)
    agree = " / ".join(f"{a.greedy_agreement:.2f}" for a in arms)
    prompts = min(a.prompts for a in arms)
    return (f"Fidelity checked in the {check.label}, {check.run}: over {prompts} prompts of {check.prompt_tokens:,} "
            f"tokens, the mean next-token KL to bf16 KV was {kl}; greedy agreement over {check.greedy_tokens} tokens "
            f"{agree} (evidence/{ENGINE_EVIDENCE}/{ENGINE_FIDELITY_FILE} in the qfn-int8kv repository).")


def _ratio_text(r: RatioEstimate, metric: str) -> str | None:
    """'0.93x [0.90-0.96] faster'; None for an interval upside down, or a verdict other than the one
    its interval gives (the card must never call a difference the interval does not show)."""
    if r.low > r.high:
        return None
    verdict = verdict_of(low=r.low, high=r.high, n=r.n, lower_is_better=metric not in HIGHER_IS_BETTER)
    if verdict != r.verdict:
        return None
    # Enough digits that an interval excluding 1.0 does not print a bound of 1.00.
    digits = 2 if r.low <= 1.0 <= r.high or "1.00" not in (f"{r.low:.2f}", f"{r.high:.2f}") else 3
    return f"{r.value:.{digits}f}x [{r.low:.{digits}f}-{r.high:.{digits}f}] {verdict}"


def _bound_text(ab: EngineAB) -> str:
    decode = [b for b in ab.breakdown if b.step_kind == "decode"]
    counts = Counter(b.bound for b in decode)
    return ", ".join(f"{bound} in {n} of {len(decode)}" for bound, n in counts.most_common())


def engine_ab_table(path: Path, *, source: str) -> EngineABTable | None:
    """The engine A/B's int8 ratios per cell (grid order: prompt length, then concurrency), each with
    its interval and verdict; None when there is no such run."""
    ab = _engine_check(path, EngineAB, "A/B", ENGINE_AB_COMMAND)
    if ab is None:
        return None
    rows = []
    for cell in sorted(ab.cells, key=lambda c: (c.input_len, c.concurrency)):
        name = f"{_tokens(cell.input_len)} x {cell.concurrency}"
        ratios = []
        for pair, metric, header in AB_COLUMNS:
            r = cell.ratios.get(pair, {}).get(metric)
            text = "not measured" if r is None else _ratio_text(r, metric)
            if text is None:
                raise RenderError(f"{path}: cell {name}, {header}: the verdict {r.verdict!r} does not follow from "
                                  f"its interval [{r.low}, {r.high}] around {r.value}",
                                  hint=f"regenerate it: {ENGINE_AB_COMMAND}")
            ratios.append(text)
        rows.append(EngineABRow(cell=name, ratios=ratios))
    repeats = sorted({e.n for c in ab.cells for arm in c.medians.values() for e in arm.values()})
    agreement = (f"a second run's median TPOT was within {max(ab.agreement.values()):.1%} of this run's over the "
                 f"{len(ab.agreement)} arm and cell pairs compared") if ab.agreement else ""
    return EngineABTable(
        source=source, label=ab.label, hardware=ab.hardware, run=ab.run,
        mtp="MTP off" if ab.mtp_k == 0 else f"MTP on (k={ab.mtp_k})",
        order=", ".join(ab.order),
        repeats=(f"{repeats[0]}" if len(repeats) == 1 else f"{repeats[0]}-{repeats[-1]}") if repeats else "no",
        headers=[header for _, _, header in AB_COLUMNS], rows=rows, bound=_bound_text(ab), agreement=agreement)


def capacity_section(plan: CapacityPlan | None, *, plan_error: str | None, evidence_dir: Path,
                     kernels_dir: Path | None, hosts: HostsComparison | None = None) -> CapacitySection:
    """The card's first section for one target."""
    speed_src, speed_triton, speed, below = kernel_speed(kernels_dir) if kernels_dir is not None else ([], "", [], [])
    acc_src, metric, acc = kernel_accuracy(kernels_dir) if kernels_dir is not None else (None, "", [])
    # The engine runs live beside the kernel evidence: both come with the patch series.
    ab_source = f"evidence/{ENGINE_AB_EVIDENCE}/{ENGINE_AB_FILE}"
    ab = engine_ab_table(kernels_dir.parent / ENGINE_AB_EVIDENCE / ENGINE_AB_FILE,
                         source=ab_source) if kernels_dir is not None else None
    kernel = {"kernel_speed_sources": speed_src, "kernel_speed_triton": speed_triton, "kernel_speed": speed,
              "kernel_speed_below_bf16": below, "accuracy_source": acc_src,
              "accuracy_metric": metric, "accuracy": acc, "engine_ab": ab}
    if plan is None:
        return CapacitySection(computed=False, error=plan_error, **kernel)
    s = plan.setup
    base = next((d for d in plan.dtypes if d.kv_cache_dtype in BASELINE_DTYPES), None)
    rows = []
    for d in plan.dtypes:
        scales = f" ({_n(d.scale_bytes_per_token_per_layer)} of it fp32 scales)" if d.scale_bytes_per_token_per_layer else ""
        vs = f"{d.pool_tokens / base.pool_tokens:.2f}x" if base and base.pool_tokens else "-"
        rows.append(CapacityRow(
            kv_cache_dtype=d.kv_cache_dtype, stored_as=d.storage, configured=d.configured,
            bytes_per_token_layer=_n(d.kv_bytes_per_token_per_layer) + scales,
            bytes_per_token_all=_n(d.attention_bytes_per_token), pool=f"{d.pool_tokens:,}", sessions=f"{d.sessions:,}",
            vs_baseline=vs, source="computed"))
    order = {d.kv_cache_dtype: i for i, d in enumerate(plan.dtypes)}
    measured = sorted(measured_pools(evidence_dir), key=lambda m: (order.get(m[0], len(order)), m[3]))
    base_measured = next((t for dt, t, _, _ in measured if base and dt == base.kv_cache_dtype), None)
    for dtype, tokens, conc, where in measured:
        vs = f"{tokens / base_measured:.2f}x" if base_measured else "-"
        rows.append(CapacityRow(
            kv_cache_dtype=dtype, stored_as="-", configured=dtype == plan.configured_dtype, bytes_per_token_layer="-",
            bytes_per_token_all="-", pool=f"{tokens:,}", sessions=f"{int(conc):,}" if conc is not None else "-",
            vs_baseline=vs, source=f"measured (`{where}`)"))
    engine_dir = kernels_dir.parent / ENGINE_EVIDENCE if kernels_dir else None
    engine = [n for n in (engine_pool_note(engine_dir / ENGINE_POOLS_FILE),
                          engine_fidelity_note(engine_dir / ENGINE_FIDELITY_FILE)) if n] if engine_dir else []
    terms = [f"{'+' if t.bytes >= 0 else '-'} {abs(t.bytes) / GIB:,.2f} GiB {t.name} "
             f"({t.source if t.source.startswith(t.basis) else f'{t.basis}: {t.source}'})" for t in plan.budget.terms]
    int8 = any(d.scale_bytes_per_token_per_layer for d in plan.dtypes)
    method = (f"{s.engine}'s page layout{', the int8 page layout of `patches/`' if int8 else ''} and the model facts "
              f"below")
    return CapacitySection(
        computed=True,
        method=method,
        scope="per GPU" if s.on_gpu else "in host memory",
        heading=(f"{'Per GPU' if s.on_gpu else 'In host memory'} on {plan.target}: TP {s.tensor_parallel_size}, max_model_len {s.max_model_len:,}, "
                 f"MTP k={s.num_speculative_tokens}, prefix caching {'on' if s.prefix_caching else 'off'}"),
        layers=plan.dtypes[0].attention_layers if plan.dtypes else 0,
        baseline=base.kv_cache_dtype if base else "",
        rows=rows,
        budget=f"{plan.budget.kv_bytes / GIB:,.2f} GiB",
        budget_terms=terms,
        budget_exact=plan.budget.exact,
        notes=[f"Model facts: `{plan.architecture_source}`.", *plan.notes, *engine],
        hosts=hosts,
        **kernel,
    )
