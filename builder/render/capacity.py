"""The model card's "What it buys you": what each KV dtype costs and holds, then what was measured.

Computed rows come from builder.plan (bytes per token per GPU, pool, sessions at max_model_len);
measured rows only from evidence files: kv_pool gate files of the target, and the H200
kernel-level speed and accuracy files of evidence/kernels/, each naming its file.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.errors import RenderError
from builder.measure.evidence import GateEvidence
from builder.plan.budget import GIB
from builder.plan.models import CapacityPlan

KERNEL_SPEED_FILE = "qsa-layouts-h200.json"
KERNEL_ACCURACY_FILE = "qsa-int8-accuracy.json"
#: The three KV dtypes the kernel evidence compares, as its arms name them.
KERNEL_ARMS = ("bf16", "fp8", "int8")
BASELINE_DTYPES = ("bfloat16", "auto")


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
    model_config = ConfigDict(frozen=True)
    case: str
    shape: str
    ms: dict[str, str]
    int8_vs_fp8: str
    int8_vs_bf16: str


class AccuracyRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    input: str
    rel_rms: dict[str, str]


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
    kernel_speed_source: str | None = None
    kernel_speed: list[KernelSpeedRow] = []
    accuracy_source: str | None = None
    accuracy_metric: str = ""
    accuracy: list[AccuracyRow] = []


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


def kernel_speed(kernels_dir: Path) -> tuple[str | None, list[KernelSpeedRow]]:
    path = kernels_dir / KERNEL_SPEED_FILE
    if not path.is_file():
        return None, []
    rows = []
    for name, case in _read_json(path).get("cases", {}).items():
        arms = case.get("arms", {})
        ms = {arm: arms.get(arm, {}).get("ms") for arm in KERNEL_ARMS}
        if not all(isinstance(v, (int, float)) and v > 0 for v in ms.values()):
            continue
        shape = case.get("shape", {})
        what = f"{shape.get('rows', '?')} rows x top-{shape.get('width', '?')}, {shape.get('q_heads', '?')}/{shape.get('kv_heads', '?')} heads"
        rows.append(KernelSpeedRow(case=name, shape=what, ms={a: f"{v:.3f}" for a, v in ms.items()},
                                   int8_vs_fp8=f"{ms['fp8'] / ms['int8']:.2f}x", int8_vs_bf16=f"{ms['bf16'] / ms['int8']:.2f}x"))
    return f"evidence/kernels/{KERNEL_SPEED_FILE}", rows


def kernel_accuracy(kernels_dir: Path) -> tuple[str | None, str, list[AccuracyRow]]:
    path = kernels_dir / KERNEL_ACCURACY_FILE
    if not path.is_file():
        return None, "", []
    data = _read_json(path)
    rows = []
    for name, result in data.get("results", {}).items():
        values = {arm: result.get(f"rel_rms_{arm}") for arm in KERNEL_ARMS}
        if all(isinstance(v, (int, float)) for v in values.values()):
            rows.append(AccuracyRow(input=result.get("note") or name, rel_rms={a: f"{v:.2g}" for a, v in values.items()}))
    return f"evidence/kernels/{KERNEL_ACCURACY_FILE}", str(data.get("metric", "")), rows


def capacity_section(plan: CapacityPlan | None, *, plan_error: str | None, evidence_dir: Path,
                     kernels_dir: Path | None) -> CapacitySection:
    """The card's first section for one target."""
    speed_src, speed = kernel_speed(kernels_dir) if kernels_dir is not None else (None, [])
    acc_src, metric, acc = kernel_accuracy(kernels_dir) if kernels_dir is not None else (None, "", [])
    kernel = {"kernel_speed_source": speed_src, "kernel_speed": speed, "accuracy_source": acc_src,
              "accuracy_metric": metric, "accuracy": acc}
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
        notes=[f"Model facts: `{plan.architecture_source}`.", *plan.notes],
        **kernel,
    )
