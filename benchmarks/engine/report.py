"""bench.md, bench.png, kv-pools.json and fidelity.json from `driver.measure` summaries (CPU; matplotlib for the plot).

    python -m benchmarks.engine.report --out evidence/engine-h200 \
        --run 2026-12-01-graphs-gates-2=evidence/engine-h200/runs/2026-12-01-graphs-gates-2.json \
        --run 2026-12-02-graphs-bench-2=evidence/engine-h200/runs/2026-12-02-graphs-bench-2.json

Each run goes by the name given before its summary ("run NAME" in every table, plot title and check).

Tables: servers and KV pools, gates, fidelity against bf16 KV, and the bench grid with int8's
ratios to fp8 and bf16 measured in the same run. Every number is "engine on an H200, small
Qwen4Exp with random weights", never the real model's.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks.engine.servers import ARMS as SERVED_ARMS

ARMS = tuple(label for label, _, _ in SERVED_ARMS)
LABEL = "engine on an H200, small Qwen4Exp with random weights (not the real model)"


def _fmt(v, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def pool_observed(summary: dict, arm: str) -> dict:
    """What the arm's kv_pool gate observed ({} when the gate did not run or the arm's gates failed)."""
    ev = summary.get("gates", {}).get(arm, {}).get("kv_pool")
    return (ev.get("observed") or {}) if isinstance(ev, dict) else {}


def cells_by_key(summary: dict, repeat: int = 0) -> dict[tuple[int, int], dict[str, dict]]:
    """{(input_len, concurrency): {arm: cell}} for one repeat's cells that completed without error."""
    grid: dict[tuple[int, int], dict[str, dict]] = {}
    for c in summary.get("bench", {}).get("cells", []):
        if c.get("error") or not c.get("completed") or c.get("repeat", 0) != repeat:
            continue
        grid.setdefault((c["input_len"], c["concurrency"]), {})[c["arm"]] = c
    return dict(sorted(grid.items()))


def repeats_of(summary: dict) -> list[int]:
    """The repeats (`measure --bench-repeats`) with a completed cell; runs before it have only 0."""
    return sorted({c.get("repeat", 0) for c in summary.get("bench", {}).get("cells", []) if c.get("completed")})


def graph_samples(runs: list["Run"]) -> list[tuple[str, dict[tuple[int, int], dict[str, dict]]]]:
    """(label, grid) per CUDA-graph run and repeat: the run's name for its only or first pass, "NAME r1" for a later one."""
    return [(r.name + (f" r{rep}" if rep else ""), cells_by_key(r.summary, rep))
            for r in runs if r.summary.get("graphs") for rep in repeats_of(r.summary)]


@dataclass(frozen=True)
class Run:
    """One `driver.measure` summary (summary.json): the name its run goes by (given with --run), its file's name, its content."""

    name: str
    file: str
    summary: dict

    @property
    def mode(self) -> str:
        return "CUDA graphs" if self.summary.get("graphs") else "eager"

    @property
    def ready(self) -> dict[str, float | None]:
        s = self.summary
        return {a: v.get("ready_s") for a, v in s.get("attempts", {}).get(s.get("weights", ""), {}).items()}


def _last(runs: list[Run], has) -> Run | None:
    return next((r for r in reversed(runs) if has(r.summary)), None)


def gates_run(runs: list[Run]) -> Run | None:
    return _last(runs, lambda s: any(isinstance(v, dict) and "kv_pool" in v for v in s.get("gates", {}).values()))


def _bench_table(run: Run) -> list[str]:
    lines: list[str] = []
    repeats = repeats_of(run.summary) or [0]
    for rep in repeats:
        if len(repeats) > 1:
            lines += [""] * bool(lines) + [f"Repeat {rep} (arm order shifted by {rep}):", ""]
        lines += _repeat_table(run, rep)
    bench = run.summary.get("bench", {})
    if bench.get("skipped"):
        lines += ["", "Skipped for the time budget: " + ", ".join(map(_skipped_label, bench["skipped"])) + "."]
    failed = [c for c in bench.get("cells", []) if c.get("error")]
    if failed:
        lines += ["", f"{len(failed)} cells failed: " + "; ".join(f"{c['arm']} {c['workload']}" for c in failed[:6])]
    benched = {c.get("arm") for c in bench.get("cells", [])} | {s.get("arm") for s in bench.get("skipped", [])}
    not_ready = [a for a in ARMS if a in run.ready and a not in benched]
    if not_ready:
        lines += ["", "Not in this run's bench (server not ready): " + ", ".join(not_ready) + "."]
    return lines


def _skipped_label(skip: dict) -> str:
    who = [skip["arm"]] if "arm" in skip else []
    who += [f"repeat {skip['repeat']}"] if skip.get("repeat") else []
    return f"{skip['input_len'] // 1024}K x c{skip['concurrency']}" + (f" ({', '.join(who)})" if who else "")


def _repeat_table(run: Run, rep: int) -> list[str]:
    lines = ["| prompt | conc. | TTFT ms int8 / fp8 / bf16 | decode tok/s int8 / fp8 / bf16 | decode int8/fp8 | decode int8/bf16 | MTP acceptance int8 |",
             "|---|---|---|---|---|---|---|"]
    for (length, conc), arms in cells_by_key(run.summary, rep).items():
        ttft = " / ".join(_fmt(arms.get(a, {}).get("mean_ttft_ms"), ".0f") for a in ARMS)
        dec = {a: arms.get(a, {}).get("mean_decode_tok_s") for a in ARMS}
        lines.append(f"| {length // 1024}K | {conc} | {ttft} | " + " / ".join(_fmt(dec[a], '.1f') for a in ARMS)
                     + f" | {_ratio(dec['int8'], dec['fp8'])} | {_ratio(dec['int8'], dec['bf16'])} | "
                     f"{_fmt(arms.get('int8', {}).get('mtp_acceptance'), '.2f')} |")
    return lines


def _graphs_over_eager(runs: list[Run]) -> list[str]:
    """decode tok/s with CUDA graphs over eager, per arm, for the cells both modes measured."""
    eager = _last(runs, lambda s: not s.get("graphs") and cells_by_key(s))
    graphs = _last(runs, lambda s: s.get("graphs") and cells_by_key(s))
    if not (eager and graphs):
        return []
    e, g = cells_by_key(eager.summary), cells_by_key(graphs.summary)
    rows = []
    for key in sorted(set(e) & set(g)):
        rows.append(f"| {key[0] // 1024}K | {key[1]} | " + " | ".join(
            _ratio(g[key].get(a, {}).get("mean_decode_tok_s"), e[key].get(a, {}).get("mean_decode_tok_s")) for a in ARMS) + " |")
    if not rows:
        return []
    return ["", f"## CUDA graphs over eager (decode tok/s, run {graphs.name} over run {eager.name})", "",
            "| prompt | conc. | " + " | ".join(ARMS) + " |", "|---|---|" + "---|" * len(ARMS), *rows]


def _across_runs(runs: list[Run]) -> list[str]:
    """int8's decode and TTFT ratios per cell in every CUDA-graph run (and repeat) that measured all three
    arms there: how far one cell's ratio moves between runs is the noise any single run's ratio carries."""
    grids = graph_samples(runs)
    keys = sorted({k for _, g in grids for k, arms in g.items() if set(ARMS) <= set(arms)})
    rows, spreads = [], []
    for key in keys:
        seen = [(label, g[key]) for label, g in grids if key in g and set(ARMS) <= set(g[key])]
        if len(seen) < 2:
            continue
        cols = []
        for metric, other in (("mean_decode_tok_s", "fp8"), ("mean_decode_tok_s", "bf16"), ("mean_ttft_ms", "fp8")):
            ratios = [(label, arms["int8"].get(metric), arms[other].get(metric)) for label, arms in seen]
            vals = [a / b for _, a, b in ratios if a and b]
            if metric == "mean_decode_tok_s" and other == "fp8" and vals:
                spreads.append(max(vals) / min(vals))
            cols.append(", ".join(f"{_ratio(a, b)} ({label})" for label, a, b in ratios))
        rows.append(f"| {key[0] // 1024}K | {key[1]} | " + " | ".join(cols) + " |")
    if not rows:
        return []
    return ["", "## The same cell across CUDA-graph runs (int8's ratios, run in brackets; r1, r2: its repeats)", "",
            "| prompt | conc. | decode int8/fp8 | decode int8/bf16 | TTFT int8/fp8 |", "|---|---|---|---|---|", *rows, "",
            f"One cell's decode int8/fp8 moves by up to {max(spreads):.2f}x between runs (median "
            f"{sorted(spreads)[len(spreads) // 2]:.2f}x): larger than any steady difference between the arms, so these "
            "runs support no engine-level decode ratio."]


def markdown(runs: list[Run]) -> str:
    names = ", ".join(r.name for r in runs)
    lines = [f"# Engine bench, run{'s' if len(runs) > 1 else ''} {names}: {LABEL}", ""]
    with_model = _last(runs, lambda s: s.get("model", {}).get("spec"))
    if with_model:
        spec, m = with_model.summary["model"]["spec"], with_model.summary["model"]
        lines += [f"Model: {spec.get('num_hidden_layers')} layers (QSA every {spec.get('qsa_every')}), "
                  f"{spec.get('num_attention_heads')} q / {spec.get('num_key_value_heads')} KV heads x {spec.get('head_dim')}, "
                  f"indexer {spec.get('indexer_n_heads')} x {spec.get('indexer_head_dim')}, budget {spec.get('indexer_budget')}; "
                  f"{m.get('parameters', 0):,} parameters, weights: {with_model.summary.get('weights')}.", ""]
    lines += ["## Runs", "", "| run | mode | phases run | ready after (s) int8 / fp8 / bf16 | total (s) |", "|---|---|---|---|---|"]
    for r in runs:
        phases = [k[:-2] for k in r.summary.get("phases", {}) if k.endswith("_s") and k[:-2] in ("gates", "determinism_probe", "fidelity", "bench")]
        lines.append(f"| {r.name} | {r.mode} | {', '.join(phases) or 'none'} | "
                     + " / ".join(_fmt(r.ready.get(a), '.0f') if r.ready.get(a) else ("not ready" if a in r.ready else "-") for a in ARMS)
                     + f" | {_fmt(r.summary.get('phases', {}).get('total_s'), '.0f')} |")
    g = gates_run(runs)
    lines += ["", "## KV pools" + (f" (run {g.name})" if g else ""), ""]
    if g:
        summary = g.summary
        lines += ["| arm | KV pool (tokens) | planned | measured / planned |", "|---|---|---|---|"]
        for arm in ARMS:
            obs = pool_observed(summary, arm)
            plan = obs.get("plan") or {}
            lines.append(f"| {arm} | {_fmt(obs.get('kv_pool_tokens'), ',')} | "
                         f"{_fmt(plan.get('planned_tokens'), ',')} | {_fmt(plan.get('measured_over_planned'), '.4f')} |")
        pools = {a: pool_observed(summary, a).get("kv_pool_tokens") for a in ARMS}
        kv_gib = {(pool_observed(summary, a).get("plan") or {}).get("planned_kv_bytes", 0) / (1 << 30) for a in ARMS} - {0}
        same = f" (the same {kv_gib.pop():g} GiB per server)" if len(kv_gib) == 1 else ""
        lines += ["", f"int8 / fp8 pool: {_ratio(pools['int8'], pools['fp8'])}; int8 / bf16 pool: "
                  f"{_ratio(pools['int8'], pools['bf16'])}{same}.", "", f"## Gates (run {g.name})", "",
                  "| gate | " + " | ".join(ARMS) + " |", "|---|" + "---|" * len(ARMS)]
        gates = summary.get("gates", {})
        for name in sorted({n for a in ARMS for n in gates.get(a, {}) if n != "error"}):
            row = []
            for a in ARMS:
                ev = gates.get(a, {}).get(name)
                row.append(f"{ev['verdict']}: {ev['summary']}" if isinstance(ev, dict) else "-")
            lines.append(f"| {name} | " + " | ".join(row) + " |")
        probe = summary.get("determinism_probe") or {}
        if probe:
            lines += ["", "Determinism probe (the gate's prompt again, one request at a time; distinct outputs of "
                      "the runs): " + "; ".join(
                          f"{a} " + (f"error {v['error'][:80]!r}" if "error" in v else
                                     ", ".join(f"{mode} {v[mode]['unique']} of {v[mode]['runs']}" for mode in v))
                          for a, v in probe.items()) + "."]
    else:
        lines.append("No run measured the gates.")
    f_run = _last(runs, lambda s: s.get("fidelity", {}).get("compare")) or _last(runs, lambda s: "fidelity" in s)
    lines += ["", "## Fidelity against bf16 KV" + (f" (run {f_run.name}, {f_run.mode})" if f_run else ""), ""]
    fid = f_run.summary["fidelity"] if f_run else {}
    if fid.get("compare"):
        lines += [f"{fid.get('prompts')} prompts of {fid.get('prompt_tokens')} tokens, {fid.get('greedy_tokens')} greedy "
                  f"tokens, KL from {fid.get('sample_ids')} sampled ids (vocab {fid.get('vocab_size')}).", "",
                  "| vs bf16 | prompts scored | errors | mean KL | KL std. error | greedy agreement | first token |",
                  "|---|---|---|---|---|---|---|"]
        for k, v in fid["compare"].items():
            lines.append(f"| {k} | {v['prompts']} | {v['errors']} | {_fmt(v['mean_kl'])} | {_fmt(v['kl_standard_error'])} | "
                         f"{_fmt(v['greedy_agreement'], '.3f')} | {_fmt(v['first_token_agreement'], '.3f')} |")
        errs = sorted({e for v in fid["compare"].values() for e in v.get("error_examples", [])})
        if errs:
            lines += ["", "Errors: " + "; ".join(f"`{e}`" for e in errs)]
    else:
        lines.append(f"Not measured: {fid.get('error', 'no fidelity phase in these runs')}")
    for r in runs:
        if "bench" in r.summary:
            lines += ["", f"## Bench, run {r.name}, {r.mode} (arms interleaved per cell, rotating order; 64 output tokens)", "",
                      *_bench_table(r)]
    lines += _graphs_over_eager(runs)
    lines += _across_runs(runs)
    return "\n".join(lines) + "\n"


def pool_check(runs: list[Run]):
    """builder.bundle.engine_evidence.EnginePoolCheck from the last run's kv_pool gates, or None without them."""
    from builder.bundle.engine_evidence import EnginePool, EnginePoolCheck

    run = gates_run(runs)
    if run is None:
        return None
    summary = run.summary

    arms, kv_bytes = {}, set()
    for arm in summary.get("gates", {}):
        obs = pool_observed(summary, arm)
        plan = obs.get("plan") or {}
        if not obs or not plan.get("planned_tokens"):
            continue
        arms[arm] = EnginePool(kv_cache_dtype=obs["cache_config_info"]["cache_dtype"],
                               measured_tokens=obs["kv_pool_tokens"], planned_tokens=plan["planned_tokens"])
        kv_bytes.add(plan["planned_kv_bytes"])
    if not arms or len(kv_bytes) != 1:
        return None
    return EnginePoolCheck(run=f"run {run.name} ({run.file})", label=LABEL, kv_bytes=kv_bytes.pop(), arms=arms)


#: fidelity.compare's labels and the --kv-cache-dtype each served: the driver's arms, bf16 as the
#: reference, compared with itself as "bf16-repeat".
_ARM_DTYPES = {label: dtype for label, dtype, _ in SERVED_ARMS}
FIDELITY_DTYPES = {**{k: v for k, v in _ARM_DTYPES.items() if k != "bf16"}, "bf16-repeat": _ARM_DTYPES["bf16"]}


def fidelity_check(runs: list[Run]):
    """builder.bundle.engine_evidence.EngineFidelityCheck from the last run that compared, or None without one."""
    from builder.bundle.engine_evidence import EngineFidelityCheck, FidelityArm

    run = _last(runs, lambda s: any((v.get("prompts") or 0) > 0 for v in s.get("fidelity", {}).get("compare", {}).values()))
    if run is None:
        return None
    fid = run.summary["fidelity"]
    arms = {label: FidelityArm(kv_cache_dtype=FIDELITY_DTYPES[label], prompts=v["prompts"], mean_kl=v["mean_kl"],
                               kl_standard_error=v.get("kl_standard_error"), greedy_agreement=v["greedy_agreement"])
            for label, v in fid["compare"].items() if label in FIDELITY_DTYPES and v.get("prompts")}
    return EngineFidelityCheck(run=f"run {run.name} ({run.file})", label=LABEL, prompt_tokens=fid["prompt_tokens"],
                               greedy_tokens=fid["greedy_tokens"], arms=arms)


def _write_model(out: Path, name: str, model) -> None:
    tmp = out / (name + ".part")
    tmp.write_text(model.model_dump_json(indent=2) + "\n")
    tmp.rename(out / name)


def _all_arm_ratios(runs: list[Run], other: str) -> dict[tuple[int, int], list[tuple[str, float]]]:
    """{cell: [(run label, int8 / other decode tok/s)]} over the CUDA-graph runs that measured both there."""
    out: dict[tuple[int, int], list[tuple[str, float]]] = {}
    for label, grid in graph_samples(runs):
        for key, arms in grid.items():
            a, b = arms.get("int8", {}).get("mean_decode_tok_s"), arms.get(other, {}).get("mean_decode_tok_s")
            if a and b:
                out.setdefault(key, []).append((label, a / b))
    return dict(sorted(out.items()))


def plot(runs: list[Run], out: Path) -> Path | None:
    """TTFT and decode bars per cell and arm for each run that measured a grid (3 cells or more), and
    int8's decode ratio to fp8 and bf16 per cell from every CUDA-graph run, one dot per run."""
    grids = [r for r in runs if len(cells_by_key(r.summary)) >= 3]
    ratios = {other: _all_arm_ratios(runs, other) for other in ("fp8", "bf16")}
    if not grids and not any(ratios.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(grids), 1)
    fig = plt.figure(figsize=(6 * cols, 11))
    layout = fig.add_gridspec(3, cols)  # a column of bars per grid run; the ratio row spans them all
    for col, run in enumerate(grids):
        grid = cells_by_key(run.summary)
        keys = list(grid)
        xs = range(len(keys))
        for row, (metric, title) in enumerate((("mean_ttft_ms", "mean TTFT (ms)"), ("mean_decode_tok_s", "decode tok/s per request"))):
            ax = fig.add_subplot(layout[row, col])
            for i, arm in enumerate(ARMS):
                ax.bar([x + (i - 1) * 0.27 for x in xs], [grid[k].get(arm, {}).get(metric, 0) for k in keys], 0.27, label=arm)
            ax.set_xticks(list(xs), [f"{k[0] // 1024}K c{k[1]}" for k in keys], rotation=30)
            ax.set_title(f"run {run.name}, {run.mode}: {title}", fontsize=10)
            if row == 0:
                ax.set_yscale("log")
            else:
                ax.legend()
    ax = fig.add_subplot(layout[2, :])
    keys = sorted(set(ratios["fp8"]) | set(ratios["bf16"]))
    for j, (other, marker) in enumerate((("fp8", "o"), ("bf16", "s"))):
        xs = [i + (j - 0.5) * 0.2 for i, k in enumerate(keys) for _ in ratios[other].get(k, [])]
        ys = [v for k in keys for _, v in ratios[other].get(k, [])]
        ax.scatter(xs, ys, marker=marker, label=f"int8 / {other}", alpha=0.8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(keys)), [f"{k[0] // 1024}K c{k[1]}" for k in keys])
    ax.set_ylabel("decode tok/s ratio")
    ax.set_title("int8's decode ratio per cell, one dot per CUDA-graph run: the run-to-run spread", fontsize=10)
    ax.legend()
    fig.suptitle(LABEL, fontsize=9)
    fig.tight_layout()
    path = out / "bench.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _run_arg(value: str) -> Run:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give NAME=SUMMARY, e.g. 2026-12-02-graphs-bench-2=evidence/engine-h200/runs/2026-12-02-graphs-bench-2.json")
    try:
        return Run(name=name, file=Path(path).name, summary=json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=_run_arg, action="append", required=True, metavar="NAME=SUMMARY",
                   help="a measure summary (summary.json) and the name its run goes by; repeat, oldest first: the gates, the "
                        "fidelity and the KV pools come from the last run that has them, every bench is shown")
    p.add_argument("--out", type=Path, required=True, help="folder for bench.md, bench.png, kv-pools.json and fidelity.json")
    args = p.parse_args(argv)
    runs: list[Run] = args.run
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "bench.md.part"
    tmp.write_text(markdown(runs))
    tmp.rename(args.out / "bench.md")
    png = plot(runs, args.out)
    from builder.constants import ENGINE_FIDELITY_FILE, ENGINE_POOLS_FILE

    wrote = [str(args.out / "bench.md"), *([str(png)] if png else [])]
    for name, model in ((ENGINE_POOLS_FILE, pool_check(runs)), (ENGINE_FIDELITY_FILE, fidelity_check(runs))):
        if model is not None:
            _write_model(args.out, name, model)
            wrote.append(name)
    print("wrote " + ", ".join(wrote))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
