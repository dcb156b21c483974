"""Benchmark results for people: a rich table, a markdown file and a PNG chart."""

from __future__ import annotations

import io
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from builder.measure.evidence import BenchEvidence

_COLUMNS = (
    ("workload", "workload", "{}"),
    ("in", "input_len", "{:,}"),
    ("out", "output_len", "{:,}"),
    ("conc", "concurrency", "{}"),
    ("ok", "completed", "{}"),
    ("TTFT mean ms", "mean_ttft_ms", "{:,.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:,.1f}"),
    ("TPOT mean ms", "mean_tpot_ms", "{:,.2f}"),
    ("ITL p99 ms", "p99_itl_ms", "{:,.2f}"),
    ("E2EL mean ms", "mean_e2el_ms", "{:,.1f}"),
    ("out tok/s", "output_throughput", "{:,.1f}"),
    ("decode tok/s/req", "mean_decode_tok_s", "{:,.1f}"),
    ("wall s", "duration", "{:,.2f}"),
)


def make_console() -> Console:
    """Rich falls back to 80 columns off a terminal, which truncates the tables in CI logs."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def _cells(r: BenchEvidence) -> list[str]:
    data = r.model_dump()
    return [fmt.format(data.get(key, 0.0)) for _, key, fmt in _COLUMNS]


def bench_table(results: list[BenchEvidence]) -> Table:
    table = Table(title="benchmark (vllm bench serve definitions)")
    for head, _, _ in _COLUMNS:
        table.add_column(head, justify="left" if head == "workload" else "right")
    for r in results:
        table.add_row(*(Text(cell) for cell in _cells(r)))
    return table


def bench_markdown(results: list[BenchEvidence], *, title: str) -> str:
    first = results[0]
    lines = [
        f"# {title}",
        "",
        f"Server: `{first.server.url}` serving `{first.server.served_model}` on vLLM {first.server.version}, "
        f"KV cache dtype `{first.server.kv_cache_dtype}`"
        + (f" (pool {first.server.kv_pool_tokens:,} tokens)" if first.server.kv_pool_tokens else "")
        + f", max_model_len {first.server.max_model_len}. "
        f"Config digest `{first.config_digest}`. Measured {first.created:%Y-%m-%d %H:%M} UTC.",
        "",
        "Definitions follow `vllm bench serve`: TTFT to the first streamed choice, TPOT = (E2EL - TTFT) / "
        "(completion tokens - 1), ITL between streamed choices; outputs are exactly `out` tokens (ignore_eos).",
        "",
        "| " + " | ".join(h for h, _, _ in _COLUMNS) + " |",
        "|" + "|".join("---" if h == "workload" else "---:" for h, _, _ in _COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in results]
    conc2 = [r for r in results if r.kind == "concurrent2"]
    if conc2:
        lines += ["", f"concurrent2 wall time: **{conc2[0].duration:.2f} s** (two requests at once)."]
    return "\n".join(lines) + "\n"


def _series(results: list[BenchEvidence], kind: str, x: str, y: str) -> tuple[list[Any], list[Any]]:
    pts = sorted((getattr(r, x), r.model_dump()[y]) for r in results if r.kind == kind)
    return [p[0] for p in pts], [p[1] for p in pts]


def bench_chart_png(results: list[BenchEvidence], *, title: str) -> bytes | None:
    """Prefill TTFT by prompt length and throughput by concurrency; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs, ys = _series(results, "prefill", "input_len", "mean_ttft_ms")
    left.plot(xs, ys, marker="o")
    left.set(title="prefill: mean TTFT", xlabel="prompt tokens", ylabel="ms")
    xs, ys = _series(results, "concurrency", "concurrency", "output_throughput")
    right.plot(xs, ys, marker="o", label="output tok/s")
    right.set(title="concurrency sweep", xlabel="concurrent requests", ylabel="output tok/s")
    twin = right.twinx()
    xs, ys = _series(results, "concurrency", "concurrency", "mean_tpot_ms")
    twin.plot(xs, ys, marker="s", color="tab:red", label="mean TPOT ms")
    twin.set_ylabel("TPOT ms")
    right.legend(loc="upper left")
    twin.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
