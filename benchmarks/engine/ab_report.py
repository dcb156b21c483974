"""engine-ab.json, ab.md and ab.png from an engine A/B's summary (`--phases ab`; CPU, matplotlib for the plot).

    python -m benchmarks.engine.ab_report --out evidence/engine-ab \
        --run NAME=evidence/engine-ab/runs/NAME.json [--run NAME2=evidence/engine-ab/runs/NAME2.json]

The first run is the one reported: per cell, each arm's median over its completed repeats with a
bootstrap 95% interval (stats.py; a cold arm's cold first pass apart), int8's ratios to fp8 and bf16 and each variant arm's ratio to its
base arm, said "faster" or "slower" only where the interval excludes 1.0; and where each arm's step
goes per cell, from its profiled pass (breakdown.py). A second run, the same A/B again, says how far
each arm's median TPOT moved between the two: a difference between arms smaller than that is noise.

Every number is the engine serving a small Qwen4Exp with random weights on the GPU the summary names,
never the real model's. Intervals are seeded by run, arm, cell and metric: the same summaries give the
same files, byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.engine import breakdown as bd
from benchmarks.engine import report
from benchmarks.engine import stats
from benchmarks.engine.ab import VARIANTS, split_label
from benchmarks.engine.phases import cell_name
from builder.bundle.engine_evidence import (AB_METRICS, AB_RATIOS, HIGHER_IS_BETTER, ABCell, EngineAB, Estimate,
                                            RatioEstimate, StepBreakdown)
from builder.constants import ENGINE_AB_FILE

AB_FILE = ENGINE_AB_FILE
MD_FILE = "ab.md"
PNG_FILE = "ab.png"
MODEL = "small Qwen4Exp with random weights (not the real model)"
#: What the tables call each metric.
METRIC_NAMES = {"median_ttft_ms": "TTFT ms", "median_tpot_ms": "TPOT ms", "median_itl_ms": "ITL p50 ms",
                "p99_itl_ms": "ITL p99 ms", "output_throughput": "output tok/s"}
#: The ratio table's metrics: what a serving engineer trades off first.
RATIO_METRICS = ("median_tpot_ms", "median_ttft_ms", "output_throughput")
FIX = ("give NAME=SUMMARY, the summary.json an A/B wrote (python -m benchmarks.engine run --phases ab --out DIR "
       "writes DIR/summary.json)")


class Refused(Exception):
    """A run the report cannot read; its message names the run or file and the fix."""


@dataclass(frozen=True)
class Run(report.Run):
    """One A/B summary (report.Run: its run's name, its file's name, its content)."""

    @property
    def ab(self) -> dict:
        return self.summary["ab"]


# --- reading a run


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def completed(result: dict) -> bool:
    """A repeat that measured the cell: no error, every request completed, none failed."""
    return (isinstance(result, dict) and "error" not in result and _number(result.get("completed"))
            and result["completed"] > 0 and not result.get("failed"))


def cold(arm: str) -> bool:
    return any(VARIANTS[s].cold for s in split_label(arm)[1])


def cold_pass(run: Run, r: dict) -> bool:
    """A cold arm's first timed pass: repeat 0 of the grid's first cell, the one that found the page cache
    cold (ab.Variant.cold). It is reported apart, not pooled with the warm repeats."""
    cells = run.ab.get("cells") or [[None, None]]
    return cold(str(r.get("arm"))) and r.get("repeat") == 0 and [r.get("input_len"), r.get("concurrency")] == list(cells[0])


def cold_passes(run: Run) -> list[dict]:
    return [r for r in run.ab.get("results", []) if completed(r) and cold_pass(run, r)]


def repeats(run: Run) -> dict[tuple[str, int, int], list[dict]]:
    """{(arm, input_len, concurrency): completed repeats in repeat order}, cold passes left out."""
    out: dict[tuple[str, int, int], list[dict]] = {}
    for r in run.ab.get("results", []):
        if completed(r) and not cold_pass(run, r):
            out.setdefault((r.get("arm"), r.get("input_len"), r.get("concurrency")), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.get("repeat", 0))
    return out


def values(rs: list[dict], metric: str) -> list[float]:
    return [float(r[metric]) for r in rs if _number(r.get(metric))]


def arms_of(run: Run) -> list[str]:
    """The arms in serving order, then any the results name that the order does not."""
    order = list(run.ab.get("order", []))
    seen = set(order)
    extra = sorted({a for a in run.ab.get("arms", {}) if a not in seen}
                   | {r.get("arm") for r in run.ab.get("results", []) if isinstance(r, dict) and r.get("arm") not in seen}
                   - {None})
    return order + extra


def cells_of(run: Run) -> list[tuple[int, int]]:
    """The grid's cells in the A/B's order, then any the results hold that the grid does not."""
    cells = [tuple(c) for c in run.ab.get("cells", [])]
    more = sorted({(r.get("input_len"), r.get("concurrency")) for r in run.ab.get("results", [])
                   if isinstance(r, dict) and _number(r.get("input_len")) and _number(r.get("concurrency"))} - set(cells))
    return cells + more


def check(run: Run) -> Run:
    """The run, or Refused where it is not an A/B or measured nothing."""
    where = f"run {run.name} ({run.file})"
    ab = run.summary.get("ab") if isinstance(run.summary, dict) else None
    if ab is None:
        raise Refused(f"{where}: no 'ab' in the summary, so it is not an engine A/B run; {FIX}")
    if not isinstance(ab, dict) or not isinstance(ab.get("results", []), list) or not isinstance(ab.get("arms", {}), dict):
        raise Refused(f"{where}: its 'ab' is not an A/B record (a dict with 'arms' and a 'results' list); {FIX}")
    if not repeats(run):
        why = "; ".join(f"{a}: {str(v['error']).splitlines()[0][:120]}" for a, v in ab.get("arms", {}).items()
                        if isinstance(v, dict) and v.get("error"))
        first = next((str(r["error"]).splitlines()[0][:120] for r in ab.get("results", [])
                      if isinstance(r, dict) and r.get("error")), None)
        why += ("; " if why and first else "") + (f"first failed repeat: {first}" if first else "")
        raise Refused(f"{where}: no completed repeat in any arm or cell ({len(ab.get('results', []))} results"
                      + (f"; {why}" if why else "") + "); measure again and give that run's summary.json")
    return run


def load_run(value: str) -> Run:
    """--run NAME=SUMMARY read and checked (Refused with the reason and the fix)."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise Refused(f"--run {value!r}: {FIX}, e.g. 2026-12-05-ab-1=evidence/engine-ab/runs/2026-12-05-ab-1.json")
    try:
        summary = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise Refused(f"run {name} ({path}): cannot read it ({type(exc).__name__}: {exc}); {FIX}") from exc
    if not isinstance(summary, dict):
        raise Refused(f"run {name} ({path}): not a summary (a JSON object); {FIX}")
    return check(Run(name=name, file=Path(path).name, summary=summary))


# --- where the run measured


def _article(name: str) -> str:
    return "an" if name[:1].upper() in "AEIOU" or name.upper().startswith("NVIDIA") else "a"


def gpu_name(summary: dict) -> str | None:
    gpus = (summary.get("host") or {}).get("gpus")
    names = [g.get("name") for g in gpus if isinstance(g, dict) and g.get("name")] if isinstance(gpus, list) else []
    if not names:
        return None
    return names[0] if len(names) == 1 else " + ".join(
        f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def label(summary: dict) -> str:
    gpu = gpu_name(summary)
    return f"engine on {_article(gpu)} {gpu}, {MODEL}" if gpu else f"engine on a GPU the summary does not name, {MODEL}"


def hardware(summary: dict) -> str:
    host = summary.get("host") or {}
    gpus = host.get("gpus")
    drivers = sorted({g.get("driver_version") for g in gpus if isinstance(g, dict) and g.get("driver_version")}) \
        if isinstance(gpus, list) else []
    parts = [gpu_name(summary) or (f"GPU unknown ({gpus})" if isinstance(gpus, str) else "GPU unknown")]
    parts.append(f"driver {', '.join(drivers)}" if drivers else "driver unknown")
    parts.append(f"{host['cpus']} CPUs" if host.get("cpus") else "CPUs unknown")
    return ", ".join(parts)


# --- the numbers


def _estimate(iv: stats.Interval) -> Estimate:
    return Estimate(value=iv.value, low=iv.low, high=iv.high, n=iv.n)


def bases(label: str) -> list[str]:
    """The arms a variant arm is served against, nearest first: 'int8-pinned-cold' -> ['int8-pinned', 'int8']
    (its suffixes dropped from the last); [] for an arm without a suffix."""
    base, suffixes = split_label(label)
    return [base + "".join(suffixes[:i]) for i in range(len(suffixes) - 1, -1, -1)]


def ratio_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator): AB_RATIOS among `arms`, then each variant arm over its nearest base
    among them ('int8-pinned' over 'int8', 'int8-pinned-cold' over 'int8-pinned' where that was served)."""
    pairs = [(a, b) for a, b in AB_RATIOS if a in arms and b in arms]
    for arm in arms:
        base = next((b for b in bases(arm) if b in arms), None)
        if base is not None:
            pairs.append((arm, base))
    return pairs


def cell_estimates(run: Run, *, resamples: int = stats.RESAMPLES) -> list[ABCell]:
    """Per cell with a completed repeat: each arm's medians, and the ratios of ratio_pairs."""
    got = repeats(run)
    cells = []
    for length, conc in cells_of(run):
        arms = [a for a in arms_of(run) if got.get((a, length, conc))]
        if not arms:
            continue
        medians: dict[str, dict[str, Estimate]] = {}
        for arm in arms:
            medians[arm] = {}
            for metric in AB_METRICS:
                xs = values(got[(arm, length, conc)], metric)
                if xs:
                    medians[arm][metric] = _estimate(stats.median_interval(
                        xs, seed=f"{run.name}/{arm}/{length}x{conc}/{metric}", resamples=resamples))
        ratios: dict[str, dict[str, RatioEstimate]] = {}
        for num, den in ratio_pairs(arms):
            per: dict[str, RatioEstimate] = {}
            for metric in AB_METRICS:
                a, b = values(got[(num, length, conc)], metric), values(got[(den, length, conc)], metric)
                try:
                    iv = stats.ratio_interval(a, b, seed=f"{run.name}/{num}/{den}/{length}x{conc}/{metric}",
                                              resamples=resamples)
                except ValueError:  # a metric one arm lacks, or a denominator of 0: no ratio to state
                    continue
                per[metric] = RatioEstimate(value=iv.value, low=iv.low, high=iv.high, n=iv.n, verdict=stats.verdict(
                    iv, lower_is_better=metric not in HIGHER_IS_BETTER))
            if per:
                ratios[f"{num}/{den}"] = per
        cells.append(ABCell(input_len=length, concurrency=conc, medians=medians, ratios=ratios))
    return cells


def step_kind(profile: dict) -> str | None:
    """The kind of step ("decode" or "mixed") whose breakdown describes the cell: the one that handed
    out more tokens, or the one with a breakdown where the other has none; None where neither has one."""
    tokens = (profile.get("tokens") or {}).get("tokens") or {}
    usable = [k for k in ("decode", "mixed") if isinstance(profile.get(k), dict) and "error" not in profile[k]
              and _number(profile[k].get("step_us_median")) and profile[k]["step_us_median"] > 0
              and profile[k].get("families")]
    if not usable:
        return None
    return max(usable, key=lambda k: tokens.get(k) or 0)  # a tie: decode, listed first


def profile_problem(profile: object) -> str | None:
    """Why a profile gives no breakdown; None where it gives one."""
    if not isinstance(profile, dict):
        return "not a profile"
    if profile.get("error"):
        return str(profile["error"]).splitlines()[0][:200]
    if list(profile.get("activities") or ["CPU", "CUDA"]) != ["CUDA"]:
        return ("recorded with CPU activity, which slows the host work a step's idle time is made of: "
                "profile again (CUDA activity alone)")
    if step_kind(profile) is None:
        return "; ".join(f"{k}: " + str((profile.get(k) or {}).get("error", "no breakdown")).splitlines()[0][:150]
                         for k in ("decode", "mixed"))
    return None


def step_breakdowns(run: Run) -> list[StepBreakdown]:
    """One StepBreakdown per arm and cell whose profiled pass has a usable step, arms in serving order."""
    got = repeats(run)
    out = []
    for arm in arms_of(run):
        profiles = (run.ab.get("arms", {}).get(arm) or {}).get("profiles") or {}
        for length, conc in cells_of(run):
            profile = profiles.get(cell_name(length, conc))
            if profile_problem(profile) is not None:
                continue
            kind = step_kind(profile)
            step = profile[kind]
            families = {k: float(v) for k, v in step["families"].items() if _number(v)}
            itls = values(got.get((arm, length, conc), []), "median_itl_ms")
            measured = statistics.median(itls) if itls else None
            median = float(step["step_us_median"])
            mean = float(step["step_us"]) if _number(step.get("step_us")) and step["step_us"] > 0 else median
            gap = abs(median / 1000 - measured) / measured if measured else None
            busy = float(step["gpu_busy_us"]) if _number(step.get("gpu_busy_us")) else None
            if measured and busy is not None:  # the host's share of the step the repeats measured
                families[bd.IDLE_ROW] = max(measured * 1000 - busy, 0.0)
            host_step = step.get("host_step_us")
            out.append(StepBreakdown(
                arm=arm, input_len=length, concurrency=conc, step_kind=kind, step_us=mean, step_us_median=median,
                families=families, gpu_busy_us=busy,
                idle_after={k: float(v) for k, v in (step.get("idle_after") or {}).items() if _number(v)},
                host_step_us=float(host_step) if _number(host_step) and host_step > 0 else None,
                host_before={k: float(v) for k, v in (step.get("host_before") or {}).items() if _number(v)},
                host_calls=len(step["host_sequence"]) if step.get("host_sequence") else None,
                host_sequence_digest=sequence_digest(step.get("host_sequence")),
                host_sequence_share=step.get("host_sequence_share") if _number(step.get("host_sequence_share")) else None,
                measured_itl_ms=measured, accounting_gap=gap, bound=max(families, key=families.__getitem__)))
    return out


def tpot_medians(run: Run) -> dict[tuple[str, int, int], float]:
    """{(arm, input_len, concurrency): median over completed repeats of median TPOT}."""
    return {key: statistics.median(xs) for key, rs in repeats(run).items() if (xs := values(rs, "median_tpot_ms"))}


def agreement(first: Run, second: Run) -> dict[str, float]:
    """'ARM LENxCONC' -> stats.run_spread of the two runs' median TPOT, for every arm and cell both measured."""
    a, b = tpot_medians(first), tpot_medians(second)
    keys = [(arm, n, c) for arm in arms_of(first) for n, c in cells_of(first) if (arm, n, c) in a and (arm, n, c) in b]
    return {f"{arm} {n}x{c}": stats.run_spread(a[(arm, n, c)], b[(arm, n, c)]) for arm, n, c in keys if a[(arm, n, c)]}


def engine_ab(runs: list[Run], *, resamples: int = stats.RESAMPLES) -> EngineAB:
    """The first run's EngineAB; a second run's only part is `agreement`."""
    run = runs[0]
    return EngineAB(run=f"run {run.name} ({run.file})", label=label(run.summary), hardware=hardware(run.summary),
                    mtp_k=int(run.ab.get("mtp_k", 0)), order=list(run.ab.get("order", [])),
                    cells=cell_estimates(run, resamples=resamples), breakdown=step_breakdowns(run),
                    agreement=agreement(run, runs[1]) if len(runs) > 1 else {},
                    agreement_run=f"run {runs[1].name} ({runs[1].file})" if len(runs) > 1 else None)


# --- the tables


def cell_label(length: int, conc: int) -> str:
    return f"{length // 1024}K x c{conc}" if length % 1024 == 0 else f"{length} x c{conc}"


def _g(v: float | None, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    return format(v, ".0f" if spec == ".3g" and abs(v) >= 1000 else spec)  # 1534, not 1.53e+03


def _est(e: Estimate | None) -> str:
    return "-" if e is None else f"{_g(e.value)} [{_g(e.low)}, {_g(e.high)}]"


def _ratio(e: RatioEstimate | None) -> str:
    return "-" if e is None else f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}] {e.verdict}"


def _started(summary: dict) -> str:
    at = summary.get("started_at")
    return f"{at[:10]} {at[11:16]} UTC" if isinstance(at, str) and len(at) >= 16 else "unknown"


def _telemetry(rs: list[dict]) -> tuple[int | None, float | None]:
    """(repeats that ran throttled, median 1-minute load average at their start); None where no repeat
    has the record (no nvidia-smi sample: unknown, not unthrottled)."""
    gpu = [g for r in rs if isinstance(g := (r.get("telemetry") or {}).get("gpu"), dict)]
    throttled = sum(bool(g.get("throttled")) for g in gpu) if gpu else None
    loads = [x for r in rs if _number(x := ((r.get("telemetry") or {}).get("host") or {}).get("loadavg_1m"))]
    return throttled, statistics.median(loads) if loads else None


def _not_measured(run: Run) -> list[str]:
    """Failed arms, skipped and failed repeats, profiles without a breakdown: listed, not hidden."""
    lines = []
    for arm in arms_of(run):
        a = run.ab.get("arms", {}).get(arm)
        if not isinstance(a, dict):
            lines.append(f"- {arm}: no record of this arm (the run stopped before serving it)")
            continue
        if a.get("error"):
            lines.append(f"- {arm}: failed: `{str(a['error']).splitlines()[0][:200]}`")
        if a.get("state") not in (None, "ready"):
            lines.append(f"- {arm}: server {a['state']}" + (f" ({'; '.join(map(str, a['root_cause']))[:200]})"
                                                          if a.get("root_cause") else ""))
        for s in a.get("skipped") or []:
            what = (f"{s['cell']} repeat {s.get('repeat')}" if "cell" in s
                    else ", ".join(f"{k} {v}" for k, v in s.items() if k != "reason"))
            lines.append(f"- {arm} {what}: skipped ({s.get('reason')})")
        for cell, p in sorted((a.get("profiles") or {}).items()):
            if (why := profile_problem(p)) is not None:
                lines.append(f"- {arm} {cell}: profile without a breakdown ({why})")
    for r in run.ab.get("results", []):
        if isinstance(r, dict) and not completed(r):
            why = (str(r["error"]).splitlines()[0][:200] if r.get("error")
                   else f"{r.get('failed', 0)} requests failed, {r.get('completed', 0)} completed")
            lines.append(f"- {r.get('arm')} {cell_name(r.get('input_len', 0), r.get('concurrency', 0))} repeat "
                         f"{r.get('repeat')}: not counted ({why})")
    return lines


def markdown(runs: list[Run], result: EngineAB) -> str:
    run = runs[0]
    ab = run.ab
    got = repeats(run)
    lines = [f"# Engine A/B, run {run.name}: {result.label}", "",
             f"- run: {result.run}, started {_started(run.summary)}",
             f"- hardware: {result.hardware}",
             f"- MTP k: {result.mtp_k}" + (" (MTP off)" if result.mtp_k == 0 else ""),
             f"- arms in serving order: {', '.join(result.order)} (each served alone, the same prompts)",
             f"- repeats per cell asked: {ab.get('repeats', '-')}; done per arm: " + ", ".join(
                 f"{a} {(ab.get('arms', {}).get(a) or {}).get('repeats_done', 0)}" for a in arms_of(run)),
             "- numbers: medians over each arm's completed repeats with bootstrap 95% intervals [low, high]; n: "
             "those repeats, throttled: how many of them ran with the GPU's clocks throttled, load 1m: the host's "
             "median load average as they started"]
    if len(runs) > 1:
        lines.append(f"- second run for agreement: run {runs[1].name} ({runs[1].file}), "
                     f"started {_started(runs[1].summary)}, {hardware(runs[1].summary)}")
    for cell in result.cells:
        n, c = cell.input_len, cell.concurrency
        lines += ["", f"## {cell_label(n, c)} (input {n} tokens, concurrency {c})", "",
                  "| arm | n | throttled | load 1m | " + " | ".join(METRIC_NAMES[m] for m in AB_METRICS) + " |",
                  "|---|---|---|---|" + "---|" * len(AB_METRICS)]
        for arm in arms_of(run):
            if arm not in cell.medians:
                lines.append(f"| {arm} | 0 | - | - | no completed repeat" + " | -" * (len(AB_METRICS) - 1) + " |")
                continue
            rs = got[(arm, n, c)]
            throttled, load = _telemetry(rs)
            lines.append(f"| {arm} | {len(rs)} | {'-' if throttled is None else throttled} | {_g(load, '.2f')} | "
                         + " | ".join(_est(cell.medians[arm].get(m)) for m in AB_METRICS) + " |")
    measured = {(cell.input_len, cell.concurrency) for cell in result.cells}
    missing = [cell_label(n, c) for n, c in cells_of(run) if (n, c) not in measured]
    if missing:
        lines += ["", "Cells without a completed repeat on any arm: " + ", ".join(missing) + "."]
    lines += ["", "## Ratios", "",
              "Numerator arm's median over the denominator's, 95% interval; \"faster\" or \"slower\" is the "
              "numerator arm's, said only where the interval excludes 1.0 (throughput: higher is faster).", ""]
    rows = [f"| {cell_label(cell.input_len, cell.concurrency)} | {pair} | "
            + " | ".join(_ratio(per.get(m)) for m in RATIO_METRICS) + " |"
            for cell in result.cells for pair, per in cell.ratios.items()]
    if rows:
        lines += ["| cell | pair | " + " | ".join(METRIC_NAMES[m].removesuffix(" ms") for m in RATIO_METRICS) + " |",
                  "|---|---|" + "---|" * len(RATIO_METRICS), *rows]
    else:
        lines.append("No pair of arms with completed repeats in the same cell.")
    lines += ["", "## Where a step goes (profiled pass, us per step)", ""]
    lines += _breakdown_table(result.breakdown) + _host_calls_table(result.breakdown) if result.breakdown else [
        "No profiled pass gave a breakdown" + (" (the A/B ran without --ab-profile)." if not ab.get("profile") else ".")]
    if len(runs) > 1:
        lines += ["", f"## Agreement with run {runs[1].name} (median TPOT ms)", "",
                  "Two runs agree on a cell where the second's median TPOT is within "
                  f"{stats.RUN_AGREEMENT:.0%} of the first's.", ""]
        a, b = tpot_medians(run), tpot_medians(runs[1])
        rows = []
        for arm in arms_of(run):
            for n, c in cells_of(run):
                key = f"{arm} {n}x{c}"
                if key in result.agreement:
                    spread = result.agreement[key]
                    rows.append(f"| {arm} | {cell_label(n, c)} | {a[(arm, n, c)]:.3f} | {b[(arm, n, c)]:.3f} | "
                                f"{spread:.1%} | {'agrees' if spread <= stats.RUN_AGREEMENT else 'differs'} |")
        only = sorted({f"{arm} {cell_label(n, cc)}" for arm, n, cc in set(a) ^ set(b)})
        lines += (["| arm | cell | run " + run.name + " | run " + runs[1].name + " | spread | verdict |",
                   "|---|---|---|---|---|---|", *rows] if rows else ["No arm and cell measured in both runs."])
        if only:
            lines += ["", "Measured in one run only: " + ", ".join(only) + "."]
    lines += _outputs_table(run)
    lines += _cold_table(run)
    lines += _sweep_table(run)
    missing_lines = _not_measured(run)
    lines += ["", "## Not measured", ""] + (missing_lines or ["Nothing: every arm served, every repeat completed."])
    return "\n".join(lines) + "\n"


def _cold_table(run: Run) -> list[str]:
    """Each cold arm's first pass (the page cache cold at start) beside its own warm repeats of that cell."""
    rows = []
    got = repeats(run)
    for r in cold_passes(run):
        warm = got.get((r["arm"], r["input_len"], r["concurrency"]), [])
        cells = []
        for m in ("median_ttft_ms", "median_tpot_ms"):
            w = values(warm, m)
            med = statistics.median(w) if w else None
            cells += [_g(r.get(m)), _g(med), f"{r[m] / med:.2f}x" if med and _number(r.get(m)) else "-"]
        rows.append(f"| {r['arm']} | {cell_label(r['input_len'], r['concurrency'])} | {len(warm)} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "## Cold start (page cache dropped before the server started)", "",
            "The cold arm's first pass of the first cell against the median of its later, warm repeats of that "
            "cell. A -pinned-cold arm (the table read whole at load) is the control for what the first pass pays "
            "anyway (first-request compiles).", "",
            "| arm | cell | warm n | TTFT cold ms | TTFT warm ms | cold/warm | TPOT cold ms | TPOT warm ms | cold/warm |",
            "|---|---|---|---|---|---|---|---|---|", *rows]


def _sweep_table(run: Run) -> list[str]:
    """The request-rate sweep per arm and rate: what the arrivals got, and goodput under the stated limits."""
    sweep, results = run.ab.get("sweep"), run.ab.get("sweep_results") or []
    if not sweep or not results:
        return []
    slo = sweep.get("slo") or {}
    lines = ["", f"## Request-rate sweep ({sweep.get('requests')} prompts of {sweep.get('input_len')} tokens per rate, "
             f"Poisson arrivals, seed {sweep.get('seed')})", "",
             f"Goodput: requests per second that completed with TTFT <= {_g(slo.get('ttft_ms'))} ms and TPOT <= "
             f"{_g(slo.get('tpot_ms'))} ms. One pass per arm and rate: no interval.", "",
             "| arm | rate /s | completed | goodput /s | request /s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | "
             "output tok/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("error"):
            lines.append(f"| {r.get('arm')} | {_g(r.get('sweep_rate'))} | failed: {str(r['error']).splitlines()[0][:120]} "
                         "| - | - | - | - | - | - |")
            continue
        lines.append(f"| {r.get('arm')} | {_g(r.get('sweep_rate'))} | {r.get('completed')}/{r.get('num_prompts')} | "
                     f"{_g(r.get('goodput'))} | {_g(r.get('request_throughput'))} | {_g(r.get('median_ttft_ms'))} | "
                     f"{_g(r.get('p99_ttft_ms'))} | {_g(r.get('median_tpot_ms'))} | {_g(r.get('output_throughput'))} |")
    return lines


def _families_shown(rows: list[StepBreakdown]) -> list[str]:
    """The family columns any row has, in breakdown.FAMILIES order, then other; the idle row is last."""
    present = {f for b in rows for f in b.families}
    return [f for f in [name for name, _ in bd.FAMILIES] + [bd.OTHER] if f in present]


def _top(d: dict[str, float]) -> str:
    top = next(iter(sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))), None)
    return f"{top[0]} ({top[1]:.0f})" if top else "-"


def sequence_digest(sequence: object) -> str | None:
    """A short digest of a step's host call sequence: equal digests, the same calls in the same order."""
    if not isinstance(sequence, list) or not sequence:
        return None
    return hashlib.sha256("\n".join(map(str, sequence)).encode()).hexdigest()[:12]


def same_calls_as(rows: list[tuple[str, object, str | None]]) -> list[list[str]]:
    """For each (arm, cell, digest), the other arms of its cell whose digest is the same."""
    return [[o_arm for j, (o_arm, o_cell, o_digest) in enumerate(rows)
             if j != i and o_cell == cell and digest and o_digest == digest]
            for i, (_, cell, digest) in enumerate(rows)]


def _outputs_digest(result: dict) -> str | None:
    """One digest of a repeat's output texts in prompt order (None where the run kept none)."""
    digests = result.get("output_sha256")
    return sequence_digest(digests) if isinstance(digests, list) and len(digests) == result.get("completed") else None


def _outputs_table(run: Run) -> list[str]:
    """Per cell, whether each arm answered the same prompts with the same texts in every repeat, and which
    other arms gave those texts: arms that compute alike (a variant and its base) must."""
    got = repeats(run)
    rows = []
    for n, c in cells_of(run):
        for arm in arms_of(run):
            digests = [_outputs_digest(r) for r in got.get((arm, n, c), [])]
            if digests and all(digests):
                rows.append((arm, (n, c), digests))
    if not rows:
        return []
    alike = same_calls_as([(arm, cell, digests[0]) for arm, cell, digests in rows])
    lines = ["", "## The same outputs (greedy, the same prompts)", "",
             "Each arm's repeats of a cell: how many gave the first repeat's output texts, and the other arms "
             "whose first repeat gave the same texts. With one request at a time nothing but the arm decides "
             "the outputs; with several, the batch's make-up can move a token.", "",
             "| arm | cell | repeats alike | same outputs as |", "|---|---|---|---|"]
    for (arm, (n, c), digests), same in zip(rows, alike):
        lines.append(f"| {arm} | {cell_label(n, c)} | {sum(d == digests[0] for d in digests)}/{len(digests)} | "
                     f"{', '.join(same) or '-'} |")
    return lines


def _host_calls_table(rows: list[StepBreakdown]) -> list[str]:
    """Per cell, which arms' commonest steps make the same CUDA calls in the same order."""
    rows = [b for b in rows if b.host_sequence_digest]
    if not rows:
        return []
    lines = ["", "## The host's CUDA calls per step (profiled pass)", "",
             "Each arm's commonest step of the kind above: its CUDA calls in order (launches, copies, syncs, "
             "graph replays), the share of steps that made exactly those, and the arms of the cell whose "
             "commonest step made the same calls in the same order: the same host work per step.", "",
             "| arm | cell | step | CUDA calls | share of steps | same calls as |", "|---|---|---|---|---|---|"]
    alike = same_calls_as([(b.arm, (b.input_len, b.concurrency, b.step_kind), b.host_sequence_digest) for b in rows])
    for b, same in zip(rows, alike):
        lines.append(f"| {b.arm} | {cell_label(b.input_len, b.concurrency)} | {b.step_kind} | {b.host_calls} | "
                     f"{_g(b.host_sequence_share, '.0%')} | {', '.join(same) or '-'} |")
    return lines


def _breakdown_table(rows: list[StepBreakdown]) -> list[str]:
    fams = _families_shown(rows)
    lines = ["| arm | cell | step | " + " | ".join(fams) + f" | {bd.IDLE_ROW} | GPU busy us | host us per step "
             "(CUDA calls) | host mostly before | GPU idle mostly after | bound | profiled step us (median) | "
             "measured ITL ms | accounting gap |", "|---|---|---|" + "---|" * (len(fams) + 10)]
    over = False
    for b in rows:
        gap = "-"
        if b.accounting_gap is not None:
            gap = f"{b.accounting_gap:.1%}"
            if b.accounting_gap > bd.ACCOUNTING_LIMIT:
                gap, over = gap + " (!)", True
        lines.append(f"| {b.arm} | {cell_label(b.input_len, b.concurrency)} | {b.step_kind} | "
                     + " | ".join(_g(b.families.get(f), ".0f") for f in fams)
                     + f" | {_g(b.families.get(bd.IDLE_ROW), '.0f')} | {_g(b.gpu_busy_us, '.0f')} | "
                     f"{_g(b.host_step_us, '.0f')} | {_top(b.host_before)} | {_top(b.idle_after)} | {b.bound} | "
                     f"{_g(b.step_us_median, '.0f')} | {_g(b.measured_itl_ms, '.3f')} | {gap} |")
    lines += ["", "Step: the kind of step that handed out more of the pass's tokens (mixed: a prefill chunk beside "
              "decoding requests). The families are the profiled pass's GPU time per step (us); "
              f"{bd.IDLE_ROW}: the measured ITL p50 less the GPU's busy time, so a row sums to the ITL the repeats "
              "measured (less what kernels on several streams overlap). Host us per step: from one step's first "
              "launch to the next's, as the host's CUDA calls show it; host mostly before: the launch the host spent "
              "longest getting to. Bound: the largest row, the host's included. Accounting gap: how far the profiled "
              "median step is from the measured ITL p50."]
    if over:
        lines.append(f"(!): the profiled step and the measured ITL differ by more than {bd.ACCOUNTING_LIMIT:.0%}: "
                     "that row may not describe the steps the repeats measured.")
    return lines


# --- the chart


def plot(result: EngineAB, path: Path) -> Path | None:
    """One panel per cell with a breakdown, one stacked bar per arm: the families in FAMILIES order, the
    GPU's idle time last and hatched, and the repeats' measured ITL as a black tick. None without a breakdown."""
    if not result.breakdown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fams = _families_shown(result.breakdown)
    # tab20's dark shades first, then its light ones: neighbouring families never share a hue
    colors = {f: plt.get_cmap("tab20")((2 * i) % 20 + (2 * i) // 20)
              for i, f in enumerate([name for name, _ in bd.FAMILIES] + [bd.OTHER])}
    cells = sorted({(b.input_len, b.concurrency) for b in result.breakdown})  # the grid's order: length, then concurrency
    arms_n = max(sum(1 for b in result.breakdown if (b.input_len, b.concurrency) == k) for k in cells)
    fig, axes = plt.subplots(1, len(cells), figsize=(max(3.5, 1.1 * arms_n + 1.5) * len(cells) + 2.5, 5.5), squeeze=False)
    for ax, (n, c) in zip(axes[0], cells):
        rows = [b for b in result.breakdown if (b.input_len, b.concurrency) == (n, c)]
        for x, b in enumerate(rows):
            bottom = 0.0
            for f in [*fams, bd.IDLE_ROW]:
                h = max(0.0, b.families.get(f, 0.0))
                idle = f == bd.IDLE_ROW
                ax.bar(x, h, 0.6, bottom=bottom, color="0.88" if idle else colors[f], edgecolor="0.3" if idle else "none",
                       hatch="//" if idle else None, linewidth=0.5)
                bottom += h
            if b.measured_itl_ms is not None:
                ax.hlines(b.measured_itl_ms * 1000, x - 0.4, x + 0.4, colors="black", linewidth=2)
        ax.set_xticks(range(len(rows)), [f"{b.arm}\n({b.step_kind})" for b in rows], fontsize=8)
        ax.set_title(cell_label(n, c), fontsize=10)
        ax.set_ylabel("us per step")
    handles = [Patch(facecolor=colors[f], label=f) for f in fams]
    handles.append(Patch(facecolor="0.88", edgecolor="0.3", hatch="//", label=f"{bd.IDLE_ROW}: waiting on the host"))
    handles.append(plt.Line2D([], [], color="black", linewidth=2, label="measured ITL p50 (repeats)"))
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(f"Where a step goes, {result.run}\n{result.label}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / fig.get_figwidth(), 1))
    # No Software entry: the chart's bytes depend on the summaries, not on which matplotlib wrote them.
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


# --- the command


def write(runs: list[Run], out: Path, *, resamples: int = stats.RESAMPLES) -> list[str]:
    """The report built whole in a folder beside `out`'s files, then moved in: a failure leaves `out` as it was."""
    result = engine_ab(runs, resamples=resamples)
    md = markdown(runs, result)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ab-report-", dir=out))
    try:
        (tmp / AB_FILE).write_text(result.model_dump_json(indent=2) + "\n")
        (tmp / MD_FILE).write_text(md)
        png = plot(result, tmp / PNG_FILE)
        names = [AB_FILE, MD_FILE, *([PNG_FILE] if png else [])]
        for name in names:
            os.replace(tmp / name, out / name)
        if png is None and (out / PNG_FILE).exists():  # an older report's chart would describe other runs
            (out / PNG_FILE).unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="NAME=SUMMARY",
                   help="an A/B summary (summary.json of `--phases ab`) and the name its run goes by; the first is "
                        "reported, a second (the same A/B again) says how far each arm's median TPOT moved")
    p.add_argument("--out", type=Path, required=True, help=f"folder for {AB_FILE}, {MD_FILE} and {PNG_FILE}")
    args = p.parse_args(argv)
    try:
        if len(args.run) > 2:
            raise Refused(f"--run given {len(args.run)} times: give the run to report and at most one more to "
                          "check it against")
        runs = [load_run(v) for v in args.run]
        if len(runs) == 2 and runs[0].name == runs[1].name:
            raise Refused(f"--run: both runs are named {runs[0].name!r}; give each its own name")
    except Refused as exc:
        print(f"ab_report: {exc}", file=sys.stderr)
        return 2
    wrote = write(runs, args.out)
    print("wrote " + ", ".join(str(args.out / n) for n in wrote))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
