"""The model card's "What it buys you": what each KV dtype costs and holds, then what was measured.

Computed rows come from builder.plan (bytes per token per GPU, pool, sessions at max_model_len);
measured rows only from evidence files: kv_pool gate files of the target, the H200
kernel-level speed and accuracy files of evidence/kernels/, and the engine A/B reports under
evidence/engine-ab/ (every engine-ab.json, combined per cell), each naming its file.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.bundle.engine_evidence import (
    AB_RATIOS,
    ABCell,
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
ENGINE_AB_COMMAND = f"python -m benchmarks.engine.ab_report --run NAME=SUMMARY --out evidence/{ENGINE_AB_EVIDENCE}/DIR"
#: The PLE table's cost in the engine: int8 with it memory-mapped (the ple-mmap patch) over int8 with it
#: pinned in host memory; the reports hold the variant over its base ('int8-pinned/int8'), the card the inverse.
PLE_PINNED_PAIR = "int8-pinned/int8"
PLE_COST_LABEL = "int8/int8-pinned"
PLE_COST_METRICS = (("median_tpot_ms", "TPOT"), ("median_ttft_ms", "TTFT"))


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
    #: The references (EngineABReport.ref) of the reports the row's entries come from, "-" for none.
    reports: str


class EngineABReport(BaseModel):
    """One engine-ab.json the table reads, as its caption lists it."""

    model_config = ConfigDict(frozen=True)
    ref: int
    run: str
    source: str
    order: str
    #: How far a second run's median TPOT was from this run's; "" when none was compared.
    agreement: str = ""


class EngineABTable(BaseModel):
    """The engine A/B as the card shows it: every report of one label, hardware and MTP setting, one
    row per cell; text from the files is escaped by the template."""

    model_config = ConfigDict(frozen=True)
    label: str
    hardware: str
    mtp: str
    repeats: str
    headers: list[str]
    rows: list[EngineABRow]
    reports: list[EngineABReport]
    #: "host in 5 of 6, ..." over the profiled decode steps; "" when the files have none.
    bound: str = ""
    #: Entries measured in more than one report: which one the table shows, and the others' values.
    also: list[str] = []
    #: int8 with the PLE table memory-mapped over int8 with it pinned, per cell measured; [] without such a run.
    ple_cost: list[str] = []
    ple_cost_reports: str = ""
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
    #: One table per label, hardware and MTP setting of the reports under evidence/engine-ab/.
    engine_ab: list[EngineABTable] = []

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


def _inverse(r: RatioEstimate, metric: str) -> RatioEstimate:
    """b/a from a/b: the percentile bootstrap's bounds invert with it (1/x keeps their order statistics),
    and the verdict is the other arm's."""
    low, high = 1 / r.high, 1 / r.low
    return RatioEstimate(value=1 / r.value, low=low, high=high, n=r.n,
                         verdict=verdict_of(low=low, high=high, n=r.n, lower_is_better=metric not in HIGHER_IS_BETTER))


def _bound_text(reports: list[EngineAB]) -> str:
    decode = [b for ab in reports for b in ab.breakdown if b.step_kind == "decode"]
    counts = Counter(b.bound for b in decode)
    return ", ".join(f"{bound} in {n} of {len(decode)}" for bound, n in counts.most_common())


def _cell_name(cell: ABCell) -> str:
    return f"{_tokens(cell.input_len)} x {cell.concurrency}"


def _entry(path: Path, cell: ABCell, pair: str, metric: str, header: str) -> str | None:
    """The ratio as the card prints it; None where the cell has no such ratio; a RenderError where the
    file's verdict does not follow from its interval."""
    r = cell.ratios.get(pair, {}).get(metric)
    if r is None:
        return None
    text = _ratio_text(r, metric)
    if text is None:
        raise RenderError(f"{path}: cell {_cell_name(cell)}, {header}: the verdict {r.verdict!r} does not follow from "
                          f"its interval [{r.low}, {r.high}] around {r.value}", hint=f"regenerate it: {ENGINE_AB_COMMAND}")
    return text


def _preferred(found: list[tuple[int, EngineAB, str]]) -> tuple[int, EngineAB, str]:
    """Of one entry measured in several reports, the one checked against a second run, then the one
    over more repeats, then the first listed."""
    return min(found, key=lambda f: (not f[1].agreement, -_repeats_of(f[1]), f[0]))


def _repeats_of(ab: EngineAB) -> int:
    return min((e.n for c in ab.cells for arm in c.medians.values() for e in arm.values()), default=0)


def _agreement_text(ab: EngineAB) -> str:
    if not ab.agreement:
        return ""
    second = ab.agreement_run or "a second run"
    return (f"the median TPOT of {second} was within {max(ab.agreement.values()):.1%} of this run's over the "
            f"{len(ab.agreement)} arm and cell pairs compared")


def load_engine_abs(ab_dir: Path) -> list[tuple[Path, str, EngineAB]]:
    """(file, its path in the repository, report) of every engine-ab.json under ``ab_dir``, in path order."""
    found = sorted(ab_dir.rglob(ENGINE_AB_FILE)) if ab_dir.is_dir() else []
    return [(path, f"evidence/{ENGINE_AB_EVIDENCE}/{path.relative_to(ab_dir).as_posix()}",
             _engine_check(path, EngineAB, "A/B", ENGINE_AB_COMMAND)) for path in found]


def engine_ab_tables(ab_dir: Path) -> list[EngineABTable]:
    """The engine A/B reports under ``ab_dir``, one table per label, hardware and MTP setting (a cell
    of one GPU is never shown as another's): per cell (grid order: prompt length, then concurrency)
    int8's ratios with their intervals and verdicts, each from the report that measured it (one
    checked against a second run first, see _preferred; the others are listed), "not measured" where
    none did; and int8 mapped over int8-pinned where a report measured that. [] without reports."""
    groups: dict[tuple[str, str, int], list[tuple[Path, str, EngineAB]]] = {}
    for path, source, ab in load_engine_abs(ab_dir):
        groups.setdefault((ab.label, ab.hardware, ab.mtp_k), []).append((path, source, ab))
    return [_engine_ab_table(label, hardware, mtp_k, members) for (label, hardware, mtp_k), members in groups.items()]


def _engine_ab_table(label: str, hardware: str, mtp_k: int, members: list[tuple[Path, str, EngineAB]]) -> EngineABTable:
    reports = [EngineABReport(ref=i, run=ab.run, source=source, order=", ".join(ab.order), agreement=_agreement_text(ab))
               for i, (_, source, ab) in enumerate(members, 1)]
    cells = sorted({(c.input_len, c.concurrency) for _, _, ab in members for c in ab.cells})
    rows, also, ple_cost, ple_refs = [], [], [], []

    def measured(key, pair, metric, header, invert=False):
        """[(ref, report, text)] of every report that measured pair/metric at the cell ``key``."""
        found = []
        for ref, (path, _, ab) in enumerate(members, 1):
            for cell in ab.cells:
                if (cell.input_len, cell.concurrency) == key and (text := _entry(path, cell, pair, metric, header)):
                    if invert:
                        text = _ratio_text(_inverse(cell.ratios[pair][metric], metric), metric)
                    found.append((ref, ab, text))
        return found

    def pick(name, header, found):
        ref, _, text = chosen = _preferred(found)
        for other in found:
            if other is not chosen:
                also.append(f"{name} {header}: ({other[0]}) {other[2]}; the table shows ({ref})'s")
        return ref, text

    for key in cells:
        name = f"{_tokens(key[0])} x {key[1]}"
        ratios, refs = [], []
        for pair, metric, header in AB_COLUMNS:
            found = measured(key, pair, metric, header)
            if not found:
                ratios.append("not measured")
                continue
            ref, text = pick(name, header, found)
            ratios.append(text)
            refs.append(ref)
        if refs:
            rows.append(EngineABRow(cell=name, ratios=ratios, reports=", ".join(str(r) for r in sorted(set(refs)))))
        costs = []
        for metric, what in PLE_COST_METRICS:
            header = f"{PLE_COST_LABEL} {what}"
            found = measured(key, PLE_PINNED_PAIR, metric, header, invert=True)
            if found:
                ref, text = pick(name, header, found)
                costs.append(f"{what} {text}")
                ple_refs.append(ref)
        if costs:
            ple_cost.append(f"{name}: {', '.join(costs)}")
    repeats = sorted({e.n for _, _, ab in members for c in ab.cells for arm in c.medians.values() for e in arm.values()})
    return EngineABTable(
        label=label, hardware=hardware, mtp="MTP off" if mtp_k == 0 else f"MTP on (k={mtp_k})",
        repeats=(f"{repeats[0]}" if len(repeats) == 1 else f"{repeats[0]}-{repeats[-1]}") if repeats else "no",
        headers=[header for _, _, header in AB_COLUMNS], rows=rows, reports=reports,
        bound=_bound_text([ab for _, _, ab in members]), also=also, ple_cost=ple_cost,
        ple_cost_reports=", ".join(f"({r})" for r in sorted(set(ple_refs))))


def capacity_section(plan: CapacityPlan | None, *, plan_error: str | None, evidence_dir: Path,
                     kernels_dir: Path | None, hosts: HostsComparison | None = None) -> CapacitySection:
    """The card's first section for one target."""
    speed_src, speed_triton, speed, below = kernel_speed(kernels_dir) if kernels_dir is not None else ([], "", [], [])
    acc_src, metric, acc = kernel_accuracy(kernels_dir) if kernels_dir is not None else (None, "", [])
    # The engine runs live beside the kernel evidence: both come with the patch series.
    ab = engine_ab_tables(kernels_dir.parent / ENGINE_AB_EVIDENCE) if kernels_dir is not None else []
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
