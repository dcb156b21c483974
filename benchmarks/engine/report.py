"""bench.md, bench.png and kv-pools.json from one `device.py measure` summary (CPU; matplotlib for the plot).

    python -m benchmarks.engine.report --summary evidence/engine-h200/runs/call25-summary.json \
        --out evidence/engine-h200 --call 25

Tables: servers and KV pools, gates, fidelity against bf16 KV, and the bench grid with int8's
ratios to fp8 and bf16 measured in the same run. Every number is "engine on an H200, small
Qwen4Exp with random weights", never the real model's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ARMS = ("int8", "fp8", "bf16")
LABEL = "engine on an H200, small Qwen4Exp with random weights (not the real model)"


def _fmt(v, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def pool_observed(summary: dict, arm: str) -> dict:
    """What the arm's kv_pool gate observed ({} when the gate did not run or the arm's gates failed)."""
    ev = summary.get("gates", {}).get(arm, {}).get("kv_pool")
    return (ev.get("observed") or {}) if isinstance(ev, dict) else {}


def cells_by_key(summary: dict) -> dict[tuple[int, int], dict[str, dict]]:
    """{(input_len, concurrency): {arm: cell}} for the cells that completed without error."""
    grid: dict[tuple[int, int], dict[str, dict]] = {}
    for c in summary.get("bench", {}).get("cells", []):
        if c.get("error") or not c.get("completed"):
            continue
        grid.setdefault((c["input_len"], c["concurrency"]), {})[c["arm"]] = c
    return dict(sorted(grid.items()))


def markdown(summary: dict, *, call: str) -> str:
    ready = {a: v.get("ready_s") for a, v in summary.get("attempts", {}).get(summary.get("weights", ""), {}).items()}
    lines = [f"# Engine bench, call {call}: {LABEL}", ""]
    spec = summary.get("model", {}).get("spec", {})
    if spec:
        lines += [f"Model: {spec.get('num_hidden_layers')} layers (QSA every {spec.get('qsa_every')}), "
                  f"{spec.get('num_attention_heads')} q / {spec.get('num_key_value_heads')} KV heads x {spec.get('head_dim')}, "
                  f"indexer {spec.get('indexer_n_heads')} x {spec.get('indexer_head_dim')}, budget {spec.get('indexer_budget')}; "
                  f"{summary['model'].get('parameters', 0):,} parameters, weights: {summary.get('weights')}.", ""]
    lines += ["## Servers and KV pools", "", "| arm | ready after (s) | KV pool (tokens) | planned | measured / planned |",
              "|---|---|---|---|---|"]
    for arm in ARMS:
        obs = pool_observed(summary, arm)
        plan = obs.get("plan") or {}
        lines.append(f"| {arm} | {_fmt(ready.get(arm), '.0f')} | {_fmt(obs.get('kv_pool_tokens'), ',')} | "
                     f"{_fmt(plan.get('planned_tokens'), ',')} | {_fmt(plan.get('measured_over_planned'), '.4f')} |")
    pools = {a: pool_observed(summary, a).get("kv_pool_tokens") for a in ARMS}
    kv_gib = {(pool_observed(summary, a).get("plan") or {}).get("planned_kv_bytes", 0) / (1 << 30) for a in ARMS} - {0}
    same = f" (the same {kv_gib.pop():g} GiB per server)" if len(kv_gib) == 1 else ""
    lines += ["", f"int8 / fp8 pool: {_ratio(pools['int8'], pools['fp8'])}; int8 / bf16 pool: "
              f"{_ratio(pools['int8'], pools['bf16'])}{same}.", "", "## Gates", "",
              "| gate | " + " | ".join(ARMS) + " |", "|---|" + "---|" * len(ARMS)]
    gates = summary.get("gates", {})
    for g in sorted({g for a in ARMS for g in gates.get(a, {}) if g != "error"}):
        row = []
        for a in ARMS:
            ev = gates.get(a, {}).get(g)
            row.append(f"{ev['verdict']}: {ev['summary']}" if isinstance(ev, dict) else "-")
        lines.append(f"| {g} | " + " | ".join(row) + " |")
    fid = summary.get("fidelity", {})
    lines += ["", "## Fidelity against bf16 KV", ""]
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
        lines.append(f"Not measured: {fid.get('error', 'no fidelity phase in this run')}")
    grid = cells_by_key(summary)
    lines += ["", "## Bench (arms interleaved per cell, rotating order; 64 output tokens)", "",
              "| prompt | conc. | TTFT ms int8 / fp8 / bf16 | decode tok/s int8 / fp8 / bf16 | decode int8/fp8 | decode int8/bf16 | MTP acceptance int8 |",
              "|---|---|---|---|---|---|---|"]
    for (length, conc), arms in grid.items():
        ttft = " / ".join(_fmt(arms.get(a, {}).get("mean_ttft_ms"), ".0f") for a in ARMS)
        dec = {a: arms.get(a, {}).get("mean_decode_tok_s") for a in ARMS}
        lines.append(f"| {length // 1024}K | {conc} | {ttft} | " + " / ".join(_fmt(dec[a], '.1f') for a in ARMS)
                     + f" | {_ratio(dec['int8'], dec['fp8'])} | {_ratio(dec['int8'], dec['bf16'])} | "
                     f"{_fmt(arms.get('int8', {}).get('mtp_acceptance'), '.2f')} |")
    skipped = summary.get("bench", {}).get("skipped", [])
    if skipped:
        lines += ["", "Skipped for the device budget: " + ", ".join(
            f"{s['input_len'] // 1024}K x c{s['concurrency']}" for s in skipped) + "."]
    failed = [c for c in summary.get("bench", {}).get("cells", []) if c.get("error")]
    if failed:
        lines += ["", f"{len(failed)} cells failed: " + "; ".join(f"{c['arm']} {c['workload']}" for c in failed[:6])]
    return "\n".join(lines) + "\n"


def pool_check(summary: dict, *, call: str, summary_name: str):
    """builder.plan.models.EnginePoolCheck from the kv_pool gates of a run, or None without them."""
    from builder.plan.models import EnginePool, EnginePoolCheck

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
    return EnginePoolCheck(run=f"call {call} ({summary_name})", label=LABEL, kv_bytes=kv_bytes.pop(), arms=arms)


def plot(summary: dict, out: Path, *, call: str) -> Path | None:
    grid = cells_by_key(summary)
    if not grid:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(grid)
    xs = range(len(keys))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, metric, title in ((axes[0], "mean_ttft_ms", "mean TTFT (ms)"), (axes[1], "mean_decode_tok_s", "decode tok/s per request")):
        for i, arm in enumerate(ARMS):
            ax.bar([x + (i - 1) * 0.27 for x in xs], [grid[k].get(arm, {}).get(metric, 0) for k in keys], 0.27, label=arm)
        ax.set_xticks(list(xs), [f"{k[0] // 1024}K c{k[1]}" for k in keys], rotation=30)
        ax.set_title(title)
    axes[0].set_yscale("log")
    axes[1].legend()
    fig.suptitle(f"call {call}: {LABEL}", fontsize=9)
    fig.tight_layout()
    path = out / "bench.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--summary", type=Path, required=True, help="summary.json of a device.py measure run")
    p.add_argument("--out", type=Path, required=True, help="folder for bench.md and bench.png")
    p.add_argument("--call", default="?", help="the device call that produced it, for the titles")
    args = p.parse_args(argv)
    summary = json.loads(args.summary.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "bench.md.part"
    tmp.write_text(markdown(summary, call=args.call))
    tmp.rename(args.out / "bench.md")
    png = plot(summary, args.out, call=args.call)
    check = pool_check(summary, call=args.call, summary_name=args.summary.name)
    if check is not None:
        from builder.constants import ENGINE_POOLS_FILE

        tmp = args.out / (ENGINE_POOLS_FILE + ".part")
        tmp.write_text(check.model_dump_json(indent=2) + "\n")
        tmp.rename(args.out / ENGINE_POOLS_FILE)
    print(f"wrote {args.out / 'bench.md'}" + (f", {png}" if png else "") + (", kv-pools.json" if check else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
